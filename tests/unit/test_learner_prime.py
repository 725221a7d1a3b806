"""PRIME: implicit process rewards, PRM loss and gradients, RLOO returns, whitening, prompt filter."""

import math

import pytest
import torch
from pydantic import ValidationError

from learner.config import PrimeConfig
from learner.prime import (
    group_accuracy,
    group_leave_one_out,
    implicit_process_rewards,
    last_token_mask,
    masked_whiten,
    normalize_process_rewards,
    pad_rows,
    prime_advantages,
    prm_loss,
    prm_pairwise_accuracy,
    prompt_filter,
    prompt_filter_metrics,
    unpad_rows,
)

T, F = True, False
BETA = 0.05


def test_implicit_process_rewards_hand_values():
    # log-ratios [0.5, -1.0, (pad)] times beta 0.05 -> [0.025, -0.05, 0].
    prm = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -7.0]])
    out = implicit_process_rewards(prm, ref, torch.tensor([[T, T, F]]), BETA)
    torch.testing.assert_close(out, torch.tensor([[0.025, -0.05, 0.0]]))


def _prm_batch():
    # Row 0: log-ratios [0.5, -1.0] -> implicit outcome 0.05 * -0.5 = -0.025, label 0.
    # Row 1: log-ratios [2.0, 4.0]  -> 0.05 * 6 = 0.3,                          label 0.
    prm = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, 1.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 0.0], [-3.0, -3.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[T, T, F], [T, T, F]])
    return prm, ref, mask, torch.tensor([0.0, 0.0])


def test_prm_loss_hand_values_and_accuracy():
    prm, ref, mask, labels = _prm_batch()
    loss, metrics = prm_loss(prm, ref, mask, labels, BETA)
    # BCE(sigma(x), 0) = softplus(x): softplus(-0.025) = 0.680725, softplus(0.3) = 0.854355; mean 0.767540.
    assert loss.item() == pytest.approx(0.767540, abs=1e-6)
    assert metrics["prm/loss"] == pytest.approx(0.767540, abs=1e-6)
    # sign agreement with 2 r_o - 1 = -1: row 0 (-0.025) right, row 1 (+0.3) wrong -> 0.5.
    assert metrics["prm/accuracy"] == 0.5
    assert metrics["prm/outcome_reward_mean"] == pytest.approx((-0.025 + 0.3) / 2)
    # positive labels: softplus(-x): softplus(0.025) = 0.705725, softplus(-0.3) = 0.554355.
    loss1, m1 = prm_loss(prm, ref, mask, torch.tensor([1.0, 1.0]), BETA)
    assert loss1.item() == pytest.approx((math.log1p(math.exp(0.025)) + math.log1p(math.exp(-0.3))) / 2, abs=1e-6)
    assert m1["prm/accuracy"] == 0.5


def test_prm_loss_gradient_flows_into_prm_not_reference():
    prm, ref, mask, labels = _prm_batch()
    loss, _ = prm_loss(prm, ref, mask, labels, BETA)
    loss.backward()
    assert ref.grad is None                       # the frozen reference is detached
    # d loss / d prm_it = beta (sigma(x_i) - y_i) / B on valid tokens:
    # row 0: 0.05 * sigma(-0.025) / 2 = 0.012344; row 1: 0.05 * sigma(0.3) / 2 = 0.014361; padding 0.
    torch.testing.assert_close(prm.grad, torch.tensor([[0.012344, 0.012344, 0.0], [0.014361, 0.014361, 0.0]]),
                               atol=1e-6, rtol=0)


def test_prm_loss_micro_batches_add_up_to_the_mini_batch():
    prm, ref, mask, labels = _prm_batch()
    full, _ = prm_loss(prm, ref, mask, labels, BETA)
    full.backward()
    g_full = prm.grad.clone()
    prm.grad = None
    halves = [prm_loss(prm[i:i + 1], ref[i:i + 1], mask[i:i + 1], labels[i:i + 1], BETA, num_responses=2)[0]
              for i in range(2)]
    assert sum(h.item() for h in halves) == pytest.approx(full.item(), abs=1e-7)
    for h in halves:
        h.backward()
    torch.testing.assert_close(prm.grad, g_full)


def test_prm_pairwise_accuracy_hand_values():
    # group 0: labels [1, 0, 1, 0], scores [0.3, -0.1, -0.2, 0.1]; weighted pairs (|dl| = 1):
    #   (0,1) ds +0.4 dl +1 agree; (0,3) ds +0.2 dl +1 agree; (1,2) ds +0.1 dl -1 disagree;
    #   (2,3) ds -0.3 dl +1 disagree -> 2/4 = 0.5.
    # group 5: labels [1, 0], scores [0.2, 0.5]: ds -0.3, dl +1 -> 0.
    # group 7: labels all equal -> 0.5.       mean over groups: (0.5 + 0 + 0.5) / 3 = 1/3.
    scores = torch.tensor([0.3, -0.1, -0.2, 0.1, 0.2, 0.5, 0.4, 0.1])
    labels = torch.tensor([1.0, 0, 1, 0, 1, 0, 1, 1])
    groups = torch.tensor([0, 0, 0, 0, 5, 5, 7, 7])
    assert prm_pairwise_accuracy(scores, labels, groups) == pytest.approx(1 / 3)
    prm = torch.zeros(8, 1)
    ones = torch.ones(8, 1, dtype=torch.bool)
    _, metrics = prm_loss(prm, -scores[:, None] / BETA, ones, labels, BETA, group_index=groups)
    assert metrics["prm/pairwise_accuracy"] == pytest.approx(1 / 3)


def test_normalize_process_rewards_batch_norm():
    # reverse cumsums: row 0 [1, -2, 0.5] -> [-0.5, -1.5, 0.5]; row 1 [0.5, 0.5, pad] -> [1, 0.5, 0]:
    # max |.| = 1.5, so every reward is divided by 1.5 + 1e-6.
    r = torch.tensor([[1.0, -2.0, 0.5], [0.5, 0.5, 9.0]])
    mask = torch.tensor([[T, T, T], [T, T, F]])
    out, scale = normalize_process_rewards(r, mask, "batch_norm")
    assert scale == pytest.approx(1.5 + 1e-6)
    torch.testing.assert_close(out, torch.tensor([[1.0, -2.0, 0.5], [0.5, 0.5, 0.0]]) / (1.5 + 1e-6))
    out, scale = normalize_process_rewards(r, mask, "none")
    assert scale == 1.0 and out[1, 2] == 0.0


def _group3():
    # One prompt, K = 3 ragged responses: a = [0.3, 0.3] (mean 0.3), b = [0.6] (0.6), c = [0, 0.6, 0.3] (0.3).
    r = torch.tensor([[0.3, 0.3, 0.0], [0.6, 0.0, 0.0], [0.0, 0.6, 0.3]])
    mask = torch.tensor([[T, T, F], [T, F, F], [T, T, T]])
    return r, mask, torch.tensor([4, 4, 4])


def test_group_leave_one_out_reference_definition():
    # v' = (K v - sum_j mean_j) / (K - 1), sum_j mean_j = 1.2:
    #   a: (0.9 - 1.2)/2 = -0.15 on both tokens;  b: (1.8 - 1.2)/2 = 0.3;
    #   c: (0 - 1.2)/2 = -0.6, (1.8 - 1.2)/2 = 0.3, (0.9 - 1.2)/2 = -0.15.
    r, mask, groups = _group3()
    out = group_leave_one_out(r, mask, groups)
    torch.testing.assert_close(out, torch.tensor([[-0.15, -0.15, 0.0], [0.3, 0.0, 0.0], [-0.6, 0.3, -0.15]]))
    # DESIGN formula per token: c_s - (0.3 + 0.6)/2 = [-0.45, 0.15, -0.15]: different tokens, same sum -0.45.
    assert out[2].sum().item() == pytest.approx(-0.45 + 0.15 - 0.15)


def test_group_leave_one_out_single_value_is_plain_rloo():
    # outcome on one token per row: exactly r_i - mean of the others; a lone group gets 0.
    vals = torch.tensor([[1.0], [0.0], [0.0], [1.0]])
    out = group_leave_one_out(vals, torch.ones(4, 1, dtype=torch.bool), torch.tensor([0, 0, 0, 9]))
    torch.testing.assert_close(out, torch.tensor([[1.0], [-0.5], [-0.5], [0.0]]))


def test_prime_returns_hand_values():
    # outcomes a = 1, b = 0, c = 0 -> RLOO 1 - 0 = 1, 0 - 0.5 = -0.5, -0.5 (added at the last token).
    # token rewards (coef 1): a [-0.15, 0.85]; b [-0.2]; c [-0.6, 0.3, -0.65]
    # returns: a [0.7, 0.85]; b [-0.2]; c [-0.95, -0.35, -0.65].
    r, mask, groups = _group3()
    cfg = PrimeConfig(process_reward_norm="none", whiten_advantages=False, process_coef=1, outcome_coef=1)
    res = prime_advantages(r, mask, torch.tensor([1.0, 0.0, 0.0]), groups, cfg)
    expected = torch.tensor([[0.7, 0.85, 0.0], [-0.2, 0.0, 0.0], [-0.95, -0.35, -0.65]])
    torch.testing.assert_close(res.returns, expected)
    torch.testing.assert_close(res.advantages, expected)
    # whitened (coefs 5 cancel): mean -0.1, Bessel var 2.64 / 5 = 0.528, std 0.726636:
    # (0.8, 0.95, -0.1, -0.85, -0.25, -0.55) / 0.726636.
    res = prime_advantages(r, mask, torch.tensor([1.0, 0.0, 0.0]), groups,
                           PrimeConfig(process_reward_norm="none"))
    torch.testing.assert_close(res.returns, 5 * expected)
    torch.testing.assert_close(res.advantages, torch.tensor(
        [[1.100964, 1.307394, 0.0], [-0.137620, 0.0, 0.0], [-1.169774, -0.344051, -0.756913]]), atol=1e-5, rtol=0)
    # process-reward metrics over the 6 valid raw rewards [0.3, 0.3, 0.6, 0, 0.6, 0.3]: mean 0.35,
    # squared deviations 3 * 0.0025 + 2 * 0.0625 + 0.1225 = 0.255, Bessel std sqrt(0.255 / 5)
    assert res.metrics["process_reward/mean"] == pytest.approx(0.35)
    assert res.metrics["process_reward/std"] == pytest.approx(math.sqrt(0.255 / 5), abs=1e-6)


def test_a_row_without_a_baseline_gets_no_advantage_and_leaves_the_whitening():
    # _group3 (prompt 4) plus a lone row d of prompt 8 (its other responses masked): process rewards
    # [0.9, 0.9], outcome 1. d has no leave-one-out baseline: return 0, advantage 0, has_baseline False,
    # and the whitening statistics are those of _group3 alone, so its rows keep exactly the
    # advantages of test_prime_returns_hand_values. (Whitening d's two returns of 0 with the others' would
    # give d +0.375 / 3.0793 = +0.1218 on both tokens, from no baseline, and shift everyone else's.)
    r, mask, groups = _group3()
    r = torch.cat([r, torch.tensor([[0.9, 0.9, 0.0]])])
    mask = torch.cat([mask, torch.tensor([[T, T, F]])])
    groups = torch.cat([groups, torch.tensor([8])])
    res = prime_advantages(r, mask, torch.tensor([1.0, 0.0, 0.0, 1.0]), groups, PrimeConfig(process_reward_norm="none"))
    assert res.has_baseline.tolist() == [True, True, True, False]
    torch.testing.assert_close(res.advantages, torch.tensor(
        [[1.100964, 1.307394, 0.0], [-0.137620, 0.0, 0.0], [-1.169774, -0.344051, -0.756913], [0.0, 0.0, 0.0]]),
        atol=1e-5, rtol=0)
    assert (res.returns[3] == 0).all() and res.metrics["prime/no_baseline_rows"] == 1.0
    # batch_norm: the lone row's rewards (reverse cumsum 1.8) do not set the scale; _group3's max
    # |reverse cumsum| is 0.9 (row c)
    assert prime_advantages(r, mask, torch.tensor([1.0, 0.0, 0.0, 1.0]), groups,
                            PrimeConfig()).metrics["process_reward/norm_scale"] == pytest.approx(0.9 + 1e-6)


def test_prime_returns_at_t0_equal_the_design_formula():
    # Whole-response return = sum_s [r_s - 1/(K-1) sum_{j!=i} mean_j] + r_o - 1/(K-1) sum_{j!=i} r_o^j.
    g = torch.Generator().manual_seed(1)
    r = torch.randn(4, 5, generator=g)
    mask = torch.arange(5)[None, :] < torch.tensor([[5], [2], [3], [1]])
    outcome = torch.tensor([1.0, 0.0, 1.0, 1.0])
    cfg = PrimeConfig(process_reward_norm="none", whiten_advantages=False, process_coef=1, outcome_coef=1)
    res = prime_advantages(r, mask, outcome, torch.zeros(4, dtype=torch.long), cfg)
    means = [(r[i] * mask[i]).sum().item() / mask[i].sum().item() for i in range(4)]
    for i in range(4):
        others = [j for j in range(4) if j != i]
        proc = sum(r[i, s].item() - sum(means[j] for j in others) / 3 for s in range(int(mask[i].sum())))
        out = outcome[i].item() - sum(outcome[j].item() for j in others) / 3
        assert res.returns[i, 0].item() == pytest.approx(proc + out, abs=1e-5)


def _reference_loop(r, mask, outcome, groups, cfg):
    """Direct loops over groups and tokens following the reference definition (python floats)."""
    B, L = r.shape
    lens = [int(mask[i].sum()) for i in range(B)]
    rew = [[r[i, t].item() for t in range(lens[i])] for i in range(B)]
    # a row alone in its group has no baseline: no part in the normalisation, returns or whitening
    based = [sum(1 for j in range(B) if groups[j] == groups[i]) >= 2 for i in range(B)]
    if cfg.process_reward_norm == "batch_norm":
        big = max(abs(sum(rew[i][t:])) for i in range(B) for t in range(lens[i]) if based[i])
        rew = [[x / (big + 1e-6) for x in row] for row in rew]
    tok = [[0.0] * lens[i] for i in range(B)]
    for g in set(groups.tolist()):
        rows = [i for i in range(B) if groups[i] == g]
        k = len(rows)
        if k < 2:
            continue
        mean_sum = sum(sum(rew[i]) / lens[i] for i in rows)
        out_sum = sum(outcome[i].item() for i in rows)
        for i in rows:
            for t in range(lens[i]):
                tok[i][t] += cfg.process_coef * (rew[i][t] * k / (k - 1) - mean_sum / (k - 1))
            tok[i][-1] += cfg.outcome_coef * (outcome[i].item() * k / (k - 1) - out_sum / (k - 1))
    ret = [[sum(tok[i][t:]) for t in range(lens[i])] for i in range(B)]
    flat = [x for i, row in enumerate(ret) for x in row if based[i]]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((x - mean) ** 2 for x in flat) / (len(flat) - 1) + 1e-8)
    adv = [[(x - mean) / std if based[i] else 0.0 for x in row] for i, row in enumerate(ret)]
    pad = lambda rows: torch.tensor([row + [0.0] * (L - len(row)) for row in rows])  # noqa: E731
    return pad(ret), pad(adv)


@pytest.mark.parametrize("norm", ["batch_norm", "none"])
def test_prime_advantages_match_a_direct_loop(norm):
    # 5 groups with ragged sizes (4, 4, 3, 2, 1) and lengths, rows of a group not contiguous.
    g = torch.Generator().manual_seed(2)
    groups = torch.tensor([3, 7, 3, 1, 7, 3, 1, 7, 1, 3, 7, 2, 2, 9])
    B, L = len(groups), 6
    r = 0.05 * torch.randn(B, L, generator=g)
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    mask = torch.arange(L)[None, :] < lengths[:, None]
    outcome = (torch.rand(B, generator=g) > 0.5).float()
    cfg = PrimeConfig(process_reward_norm=norm)
    res = prime_advantages(r, mask, outcome, groups, cfg)
    ret, adv = _reference_loop(r, mask, outcome, groups, cfg)
    torch.testing.assert_close(res.returns, ret, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res.advantages, adv, atol=1e-5, rtol=1e-5)
    assert (res.advantages[~mask] == 0).all() and (res.returns[~mask] == 0).all()
    assert res.has_baseline.tolist() == [g != 9 for g in groups.tolist()]     # prompt 9 has one row
    assert (res.advantages[groups == 9] == 0).all()


def test_prime_advantages_drop_gradients():
    r, mask, groups = _group3()
    r.requires_grad_(True)
    res = prime_advantages(r, mask, torch.tensor([1.0, 0, 0]), groups, PrimeConfig())
    assert not res.advantages.requires_grad


def test_masked_whiten_and_last_token():
    x = torch.tensor([[1.0, 2.0, 99.0], [3.0, 99.0, 99.0]])
    mask = torch.tensor([[T, T, F], [T, F, F]])
    # valid [1, 2, 3]: mean 2, Bessel var 1 -> [-1, 0, 1]
    torch.testing.assert_close(masked_whiten(x, mask), torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
                               atol=1e-6, rtol=0)
    assert last_token_mask(mask).tolist() == [[F, T, F], [T, F, F]]
    assert last_token_mask(torch.tensor([[F, F]])).tolist() == [[F, F]]


def test_prompt_filter_band_and_metrics():
    # K = 4: accuracies 0, 0.25, 0.5, 0.75, 1 -> PRIME's [0.2, 0.8] keeps the middle three (Sky-T1's
    # "drop all-correct and all-wrong").
    correct = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    acc = group_accuracy(correct)
    assert acc.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    keep = prompt_filter(acc, 0.2, 0.8)
    assert keep.tolist() == [F, T, T, T, F]
    assert prompt_filter_metrics(keep) == {"prompts/filtered_frac": 0.4, "prompts/kept": 3.0}
    # K = 5: 1/5 = 0.2 and 4/5 = 0.8 lie on the band's ends, which are inclusive.
    acc5 = group_accuracy(torch.tensor([[1, 0, 0, 0, 0], [1, 1, 1, 1, 0]]))
    assert prompt_filter(acc5, 0.2, 0.8).tolist() == [T, T]
    # ragged: present [T, T, F, F] -> 1 of 2 correct = 0.5
    assert group_accuracy(torch.tensor([[1, 0, 1, 1]]), torch.tensor([[T, T, F, F]])).tolist() == [0.5]


def test_prime_config():
    cfg = PrimeConfig()
    assert (cfg.beta, cfg.filter_low, cfg.filter_high, cfg.prm_lr, cfg.prm_grad_clip) == (0.05, 0.2, 0.8, 1e-6, 10.0)
    with pytest.raises(ValidationError):
        PrimeConfig(filter_low=0.9, filter_high=0.1)
    with pytest.raises(ValidationError):
        PrimeConfig(beta=0)
    with pytest.raises(ValidationError):
        PrimeConfig(unknown=1)


def test_pad_rows_round_trip():
    import numpy as np

    rows = [np.array([0.5, -1.0], dtype=np.float32), np.array([2.0], dtype=np.float32)]
    values, mask = pad_rows(rows)
    assert values.tolist() == [[0.5, -1.0], [2.0, 0.0]] and mask.tolist() == [[T, T], [T, F]]
    back = unpad_rows(values, mask)
    assert [b.tolist() for b in back] == [[0.5, -1.0], [2.0]]
