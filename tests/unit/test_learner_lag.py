"""Lag histograms per optimizer update and importance-ratio statistics."""

import math

import pytest
import torch

from learner.lag import LAG_BUCKETS, LagReport, lag_bucket, lag_bucket_stats, lag_report, ratio_stat_values, ratio_stats
from learner.masked import read_floats


def test_lag_report_hand_computed():
    # learner version 5; version_start [5, 4, 4, 2] -> lag [0, 1, 1, 3]; tokens [10, 3, 7, 1].
    # samples {0: 1, 1: 2, 3: 1}; tokens {0: 10, 1: 10, 3: 1}; mean (0+1+1+3)/4 = 1.25;
    # token mean (0*10 + 1*10 + 3*1)/21 = 13/21;
    # version_end [5, 5, 4, 3]: responses 1 and 3 straddle a weight update.
    r = lag_report(5, torch.tensor([5, 4, 4, 2]), torch.tensor([10, 3, 7, 1]),
                   version_end=torch.tensor([5, 5, 4, 3]))
    assert r.sample_hist == {0: 1, 1: 2, 3: 1} and r.token_hist == {0: 10, 1: 10, 3: 1}
    m = r.metrics()
    assert m["lag/mean"] == 1.25 and m["lag/token_mean"] == pytest.approx(13 / 21) and m["lag/max"] == 3
    assert m["lag/straddled"] == 2 and m["lag/samples"] == 4 and m["lag/tokens"] == 21
    # histograms with string keys: the row reads the same back from metrics.jsonl
    assert m["lag/hist"] == {"0": 1, "1": 2, "3": 1} and m["lag/token_hist"] == {"0": 10, "1": 10, "3": 1}
    # the same report as the step-start (generation) lag: only the prefix differs
    start = r.metrics("lag_start/")
    assert start == {k.replace("lag/", "lag_start/"): v for k, v in m.items()}


def test_lag_from_token_mask_and_merge():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    a = lag_report(3, torch.tensor([3, 2]), mask)               # lags [0, 1], tokens [2, 3]
    assert a.token_hist == {0: 2, 1: 3}
    b = lag_report(4, torch.tensor([3, 2]), mask)               # same samples one update later: [1, 2]
    merged = a.merge(b)
    assert merged.sample_hist == {0: 1, 1: 2, 2: 1} and merged.token_hist == {0: 2, 1: 5, 2: 3}
    assert merged.max == 2 and merged.mean == pytest.approx(1.0)


def test_negative_lag():
    with pytest.raises(ValueError, match="negative lag"):
        lag_report(1, torch.tensor([2]), torch.tensor([4]))
    assert LagReport().metrics()["lag/max"] == 0.0


def test_ratio_stats_hand_computed():
    # rho = [1.25, 0.7, 1.1, 0.5], A = [+1, -1, -1, +1], eps 0.2 / 0.28, T = 4.
    # clipped low: rho < 0.8 with A < 0 -> t2; clipped high: rho > 1.28 with A > 0 -> none.
    # outside the band: below t2, t4 (0.5); above none.
    # k3 = rho - 1 - ln rho = [0.026856, 0.056675, 0.004690, 0.193147] -> mean 0.070342
    # k1 = -mean(ln rho) = -(0.223144 - 0.356675 + 0.095310 - 0.693147) / 4 = 0.182842
    rho = [1.25, 0.7, 1.1, 0.5]
    new = torch.tensor([[math.log(r) for r in rho]])
    m = ratio_stats(new, torch.zeros(1, 4), torch.tensor([[1.0, -1, -1, 1]]), torch.ones(1, 4, dtype=torch.bool),
                    0.2, 0.28, total_tokens=4)
    assert m["ratio/mean"] == pytest.approx(0.8875) and m["ratio/max"] == pytest.approx(1.25)
    assert m["clip/low_frac"] == 0.25 and m["clip/high_frac"] == 0.0 and m["clip/frac"] == 0.25
    assert m["ratio/below_band_frac"] == 0.5 and m["ratio/above_band_frac"] == 0.0
    assert m["mismatch/kl_k3"] == pytest.approx(0.070342, abs=1e-6)
    assert m["mismatch/kl_k1"] == pytest.approx(0.182842, abs=1e-6)


def test_ratio_stats_masks_and_prefix():
    # Masked token has a huge ratio that must not show up; T = 2 global, 1 token here.
    new = torch.tensor([[math.log(1.5), 10.0]])
    m = ratio_stats(new, torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[True, False]]), 0.2, 0.2,
                    total_tokens=2, prefix="behaviour/")
    assert m["behaviour/ratio/max"] == pytest.approx(1.5) and m["behaviour/ratio/mean"] == pytest.approx(0.75)
    assert m["behaviour/clip/high_frac"] == 0.5
    empty = ratio_stats(new, torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.bool), 0.2, 0.2, 1)
    assert empty["ratio/max"] == -math.inf and empty["ratio/mean"] == 0.0


# ---------------------------------------------------------------- per-lag-bucket statistics
def test_lag_bucket_labels():
    labels = {lag: lag_bucket(lag) for lag in (0, 1, 2, 3, 4, 7, 8, 31)}
    assert labels == {0: "0", 1: "1", 2: "2-3", 3: "2-3", 4: "4-7", 7: "4-7", 8: "8+", 31: "8+"}
    assert [b[0] for b in LAG_BUCKETS] == ["0", "1", "2-3", "4-7", "8+"]
    with pytest.raises(ValueError, match="negative"):
        lag_bucket(-1)


def _bucket_batch():
    """Four rows of a micro-batch, update lags [0, 2, 3, 9], logp_old = 0 so rho is exact:

    row 0 (lag 0): rho [1.0, 1.5], A +1, entropy [0.5, 0.7]
    row 1 (lag 2): rho [0.5] (+ a padded slot), A -1, entropy [1.0]
    row 2 (lag 3): rho [1.0, 0.75], A -1, entropy [0.2, 0.4]
    row 3 (lag 9): rho [2.0] (+ a padded slot), A +1, entropy [2.0]
    """
    rho = [[1.0, 1.5], [0.5, 1e9], [1.0, 0.75], [2.0, 1e9]]       # 1e9: padding, must never show
    logp = torch.tensor([[math.log(r) for r in row] for row in rho], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, False]])
    ent = torch.tensor([[0.5, 0.7], [1.0, 9.0], [0.2, 0.4], [2.0, 9.0]], dtype=torch.float64)
    return logp, torch.zeros_like(logp), adv, mask, ent, torch.tensor([0, 2, 3, 9])


def test_lag_bucket_stats_hand_computed():
    # T = 8 (the mini-batch has 2 more tokens elsewhere); eps 0.2 / 0.2.
    # bucket 0:   tokens 2; ratio sum 2.5 -> 0.3125; max 1.5; high clip (1.5 > 1.2, A > 0) 1/8;
    #             k3 = 0 + (0.5 - ln 1.5) = 0.0945349 -> /8 = 0.0118169; entropy 1.2/8 = 0.15
    # bucket 2-3: tokens 3; ratio 0.5 + 1 + 0.75 = 2.25 -> 0.28125; max 1.0; low clip (0.5, 0.75 < 0.8,
    #             A < 0) 2/8; k3 = (ln 2 - 0.5) + 0 + (ln(4/3) - 0.25) = 0.2308289 -> 0.0288536; entropy 1.6/8
    # bucket 8+:  tokens 1; ratio 2/8; max 2; high clip 1/8; k3 = 1 - ln 2 = 0.3068528 -> 0.0383566; entropy 2/8
    # buckets 1 and 4-7: no tokens, no keys
    logp, old, adv, mask, ent, lag = _bucket_batch()
    m = lag_bucket_stats(logp, old, adv, mask, lag, 0.2, 0.2, total_tokens=8, entropy=ent)
    assert {k.split("/")[1] for k in m} == {"0", "2-3", "8+"}
    b0, b23, b8 = ({k.removeprefix(f"lagbucket/{b}/"): v for k, v in m.items() if k.startswith(f"lagbucket/{b}/")}
                   for b in ("0", "2-3", "8+"))
    assert b0 == pytest.approx({"tokens": 2, "ratio/mean": 0.3125, "ratio/max": 1.5, "clip/low_frac": 0.0,
                                "clip/high_frac": 0.125, "mismatch/kl_k3": 0.0118169, "entropy/mean": 0.15,
                                # the covariance's moments, /T: logp (0, ln 1.5 = 0.405465), A +1
                                "cov/logp_adv_xy": 0.0506831, "cov/logp": 0.0506831, "cov/adv": 0.25},
                               abs=1e-7)
    # logp ln 0.5 = -0.693147, 0, ln 0.75 = -0.287682, A -1: xy 0.980829 / 8, logp -0.980829 / 8, A -3 / 8
    assert b23 == pytest.approx({"tokens": 3, "ratio/mean": 0.28125, "ratio/max": 1.0, "clip/low_frac": 0.25,
                                 "clip/high_frac": 0.0, "mismatch/kl_k3": 0.0288536, "entropy/mean": 0.2,
                                 "cov/logp_adv_xy": 0.1226036, "cov/logp": -0.1226036, "cov/adv": -0.375},
                                abs=1e-7)
    assert b8 == pytest.approx({"tokens": 1, "ratio/mean": 0.25, "ratio/max": 2.0, "clip/low_frac": 0.0,
                                "clip/high_frac": 0.125, "mismatch/kl_k3": 0.0383566, "entropy/mean": 0.25,
                                "cov/logp_adv_xy": 0.0866434, "cov/logp": 0.0866434, "cov/adv": 0.125},
                               abs=1e-7)
    no_entropy = lag_bucket_stats(logp, old, adv, mask, lag, 0.2, 0.2, total_tokens=8)
    assert not any(k.endswith("entropy/mean") for k in no_entropy)
    assert lag_bucket_stats(logp, old, adv, torch.zeros_like(mask), lag, 0.2, 0.2, 8) == {}


def test_one_bucket_reuses_the_overall_ratio_statistics_and_a_row_without_tokens_adds_no_bucket():
    # rows 0 and 2 of _bucket_batch at lag 0 with all their tokens: bucket 0 holds every loss token, so its
    # values are the micro-batch's own ratio statistics (tokens 4; ratio (1 + 1.5 + 1 + 0.75) / 8; max 1.5)
    logp, old, adv, mask, ent, _ = _bucket_batch()
    rows = [0, 2]
    one = lag_bucket_stats(logp[rows], old[rows], adv[rows], mask[rows], torch.tensor([0, 0]), 0.2, 0.2, 8, ent[rows])
    overall = ratio_stats(logp[rows], old[rows], adv[rows], mask[rows], 0.2, 0.2, 8)
    assert one["lagbucket/0/tokens"] == 4 and one["lagbucket/0/ratio/mean"] == pytest.approx(4.25 / 8)
    assert one["lagbucket/0/ratio/max"] == 1.5 and one["lagbucket/0/entropy/mean"] == pytest.approx(1.8 / 8)
    assert all(one[f"lagbucket/0/{k}"] == overall[k] for k in ("ratio/mean", "ratio/max", "clip/low_frac",
                                                               "clip/high_frac", "mismatch/kl_k3"))
    # a row at lag 9 whose tokens are all masked (a truncated response under a mask): no 8+ bucket
    no_tokens = mask.clone()
    no_tokens[3] = False
    m = lag_bucket_stats(logp, old, adv, no_tokens, torch.tensor([0, 2, 3, 9]), 0.2, 0.2, 8, ent)
    assert {k.split("/")[1] for k in m} == {"0", "2-3"}


def test_covariance_of_log_probs_and_advantages_per_step_by_hand():
    """Three trained tokens, logp (-1, -2, -0.5), A (1, -1, 1), in two updates (T 2, then 1):
    mean(logp A) = (-1 + 2 - 0.5) / 3 = 1/6, mean(logp) = -3.5/3, mean(A) = 1/3:
    cov = 1/6 + 3.5/9 = 0.5555556. A bucket whose advantage is constant has covariance 0."""
    from learner.lag import finish_covariance
    from learner.reduce import combine_updates

    def update(logp, adv, lags):
        logp = torch.tensor([logp], dtype=torch.float64)
        adv = torch.tensor([adv], dtype=torch.float64)
        mask = torch.ones_like(logp, dtype=torch.bool)
        values = read_floats(ratio_stat_values(logp, logp, adv, mask, 0.2, 0.2, total_tokens=logp.shape[1]))
        return values | lag_bucket_stats(logp, logp, adv, mask, torch.tensor(lags), 0.2, 0.2, logp.shape[1])

    step = finish_covariance(combine_updates([update([-1.0, -2.0], [1.0, -1.0], [0]), update([-0.5], [1.0], [1])],
                                             [2.0, 1.0]))
    assert step["cov/logp_adv"] == pytest.approx(1 / 6 + 3.5 / 9)
    assert not any(k.endswith(("cov/logp_adv_xy", "cov/logp", "cov/adv")) for k in step)   # moments folded
    # bucket 0 (both tokens of update 1): mean(logp A) = 0.5, mean(logp) -1.5, mean(A) 0: cov 0.5
    assert step["lagbucket/0/cov/logp_adv"] == pytest.approx(0.5)
    assert step["lagbucket/1/cov/logp_adv"] == pytest.approx(0.0)          # one token: no spread
