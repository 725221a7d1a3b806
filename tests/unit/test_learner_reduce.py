"""One reduction rule for metrics: across micro-batches and ranks, then across a step's updates."""

import math

import pytest
import torch

from learner.config import PolicyLossConfig
from learner.loss import PolicyLossInputs, policy_loss
from learner.reduce import combine_updates, is_count, reduce_metrics, reduce_op


def test_reduce_op_by_key_name():
    assert [reduce_op(k) for k in ("ratio/max", "ratio/min", "loss/pg", "tokens/count")] == ["max", "min", "sum", "sum"]
    assert reduce_op("lagbucket/2-3/ratio/max") == "max" and reduce_op("lagbucket/2-3/entropy/mean") == "sum"
    assert [is_count(k) for k in ("tokens/count", "lagbucket/8+/tokens", "lagbucket/8+/entropy/mean", "lag/tokens")] \
        == [True, True, False, False]


def test_reduce_metrics_sums_per_token_values():
    out = reduce_metrics([{"loss/pg": 0.25, "ratio/max": 1.5, "ratio/min": 0.9},
                          {"loss/pg": 0.5, "ratio/max": 1.2, "ratio/min": 0.7}])
    assert out == {"loss/pg": 0.75, "ratio/max": 1.5, "ratio/min": 0.7}


def test_combine_updates_is_token_weighted():
    # entropy 1.0 over 10 tokens and 4.0 over 30: (10 + 120) / 40 = 3.25; max of maxes; counts add
    out = combine_updates([{"entropy/mean": 1.0, "ratio/max": 2.0, "ratio/min": 0.5, "tokens/count": 10},
                           {"entropy/mean": 4.0, "ratio/max": 1.5, "ratio/min": 0.7, "tokens/count": 30}], [10, 30])
    assert out == {"entropy/mean": pytest.approx(3.25), "ratio/max": 2.0, "ratio/min": 0.5, "tokens/count": 40}


def test_a_step_without_tokens_has_no_entropy_not_a_zero_one():
    # 0.0 would read as a collapsed policy to the entropy controller and the guard: NaN says "no data"
    out = combine_updates([{"entropy/mean": 0.0, "ratio/max": 1.0, "tokens/count": 0}], [0])
    assert math.isnan(out["entropy/mean"]) and out["ratio/max"] == 1.0 and out["tokens/count"] == 0
    assert combine_updates([], []) == {}


def test_mismatch_kl_keeps_the_steps_first_update_beside_the_token_weighted_mean():
    # update 1 (the step's starting weights): k3 0.01 over 10 tokens; update 2 (learner moved): 0.05 over 30
    out = combine_updates([{"mismatch/kl_k3": 0.01, "mismatch/kl_k1": 0.02},
                           {"mismatch/kl_k3": 0.05, "mismatch/kl_k1": -0.01}], [10, 30])
    assert out["mismatch/kl_k3"] == pytest.approx((0.1 + 1.5) / 40)      # 0.04: the learner's movement too
    assert out["mismatch/start_kl_k3"] == 0.01 and out["mismatch/start_kl_k1"] == 0.02
    assert "mismatch/start_kl_k3" not in combine_updates([{"loss/pg": 1.0}], [5])


# ---------------------------------------------------------------- per-lag-bucket metrics through the reduction
def _micro_batch(rows, total_tokens, version):
    """Loss metrics of one micro-batch: rows = [(version_start, [rho...], A, [entropy...])], logp_old = 0,
    right-padded with a garbage ratio; every row's update lag is version - version_start."""
    width = max(len(r[1]) for r in rows)
    logp = torch.tensor([[math.log(x) for x in rho] + [30.0] * (width - len(rho)) for _, rho, _, _ in rows],
                        dtype=torch.float64)
    mask = torch.tensor([[True] * len(rho) + [False] * (width - len(rho)) for _, rho, _, _ in rows])
    ent = torch.tensor([e + [9.0] * (width - len(e)) for _, _, _, e in rows], dtype=torch.float64)
    inputs = PolicyLossInputs(logprobs=logp, old_logprobs=torch.zeros_like(logp),
                              advantages=torch.tensor([a for _, _, a, _ in rows], dtype=torch.float64),
                              loss_mask=mask, entropy=ent,
                              lag=version - torch.tensor([v for v, _, _, _ in rows]))
    return policy_loss(inputs, PolicyLossConfig(), total_tokens)[1]


def test_lag_buckets_reduce_across_micro_batches_ranks_and_updates():
    """Step of two updates at versions 10 and 11 (eps 0.2):

    update 0, T = 5 tokens over two ranks:
      rank 0, micro-batch a: row vs 10 (lag 0): rho [1.0, 1.5], A +1, H [0.5, 0.7]
                             row vs 7  (lag 3): rho [0.5],      A -1, H [1.0]
      rank 0, micro-batch b: row vs 8  (lag 2): rho [1.25],     A +1, H [0.6]
      rank 1, micro-batch c: row vs 9  (lag 1): rho [1.0],      A -1, H [0.3]
    update 1, T = 2: row vs 8 (now lag 3): rho [1.0, 0.7], A -1, H [0.1, 0.3]

    bucket 2-3 over the step: 4 tokens (0.5 | 1.25 | 1.0, 0.7)
      entropy (1.0 + 0.6 + 0.1 + 0.3) / 4 = 0.5; ratio mean (0.5 + 1.25 + 1.0 + 0.7) / 4 = 0.8625;
      ratio max 1.25; low clip (0.5 and 0.7 < 0.8, A < 0) 2/4; high clip (1.25 > 1.2, A > 0) 1/4;
      k3 = (ln 2 - 0.5) + (0.25 - ln 1.25) + 0 + (-0.3 - ln 0.7) = 0.1931472 + 0.0268564 + 0.0566749 -> /4
    bucket 0: 2 tokens, entropy 0.6, ratio mean 1.25, max 1.5, high clip 1/2; bucket 1: 1 token, H 0.3.
    The whole step's entropy: (0.5 + 0.7 + 1.0 + 0.6 + 0.3 + 0.1 + 0.3) / 7 = 0.5.
    """
    a = _micro_batch([(10, [1.0, 1.5], 1.0, [0.5, 0.7]), (7, [0.5], -1.0, [1.0])], 5, 10)
    b = _micro_batch([(8, [1.25], 1.0, [0.6])], 5, 10)
    c = _micro_batch([(9, [1.0], -1.0, [0.3])], 5, 10)
    update0 = reduce_metrics([reduce_metrics([a, b]), c])           # rank 0's micro-batches, then the ranks
    update1 = reduce_metrics([_micro_batch([(8, [1.0, 0.7], -1.0, [0.1, 0.3])], 2, 11)])
    step = combine_updates([update0, update1], [5, 2])
    k3 = (math.log(2) - 0.5) + (0.25 - math.log(1.25)) + (-0.3 - math.log(0.7))
    assert step["lagbucket/2-3/tokens"] == 4
    assert step["lagbucket/2-3/entropy/mean"] == pytest.approx(0.5)
    assert step["lagbucket/2-3/ratio/mean"] == pytest.approx(0.8625)
    assert step["lagbucket/2-3/ratio/max"] == pytest.approx(1.25)
    assert step["lagbucket/2-3/clip/low_frac"] == pytest.approx(0.5)
    assert step["lagbucket/2-3/clip/high_frac"] == pytest.approx(0.25)
    assert step["lagbucket/2-3/mismatch/kl_k3"] == pytest.approx(k3 / 4)
    assert (step["lagbucket/0/tokens"], step["lagbucket/1/tokens"]) == (2, 1)
    assert step["lagbucket/0/entropy/mean"] == pytest.approx(0.6)
    assert step["lagbucket/0/ratio/mean"] == pytest.approx(1.25) and step["lagbucket/0/ratio/max"] == pytest.approx(1.5)
    assert step["lagbucket/0/clip/high_frac"] == pytest.approx(0.5)
    assert step["lagbucket/1/entropy/mean"] == pytest.approx(0.3)
    assert not any(k.startswith(("lagbucket/4-7/", "lagbucket/8+/")) for k in step)
    assert step["entropy/mean"] == pytest.approx(0.5) and step["tokens/count"] == 7
    # splitting differently (one micro-batch for all of update 0) changes nothing
    whole = _micro_batch([(10, [1.0, 1.5], 1.0, [0.5, 0.7]), (7, [0.5], -1.0, [1.0]), (8, [1.25], 1.0, [0.6]),
                          (9, [1.0], -1.0, [0.3])], 5, 10)
    assert combine_updates([whole, update1], [5, 2]) == pytest.approx(step)
