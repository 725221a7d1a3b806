"""Group advantages, truncation masks, zero-advantage rejection, DAPO overlong shaping."""

import math

import pytest
import torch

from learner.advantages import (
    broadcast_to_tokens,
    compute_advantages,
    group_normalize,
    overlong_penalty,
    scale_rewards,
)
from learner.config import AdvantageConfig

EPS = 1e-6
T, F = True, False


def _run(rewards, truncated, lengths=None, max_len=None, present=None, **cfg):
    r = torch.tensor(rewards, dtype=torch.float32)
    lengths = torch.tensor(lengths) if lengths is not None else torch.full(r.shape, 10)
    pres = None if present is None else torch.tensor(present)
    return compute_advantages(r, lengths, torch.tensor(truncated), AdvantageConfig(**cfg), max_len, pres)


def test_group_normalize_bessel_std():
    # r = [1, 0, 0, 0]: mean 0.25; squared deviations 0.5625 + 3 * 0.0625 = 0.75;
    # unbiased var = 0.75 / 3 = 0.25 -> std 0.5; A = 0.75 / 0.5 = 1.5 and -0.25 / 0.5 = -0.5.
    adv, degenerate = group_normalize(torch.tensor([[1.0, 0, 0, 0]]), torch.ones(1, 4, dtype=torch.bool), EPS)
    torch.testing.assert_close(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5]]) * 0.5 / (0.5 + EPS))
    assert not degenerate.item()
    # r = [1, 0, 0, 1]: mean 0.5, var = 4 * 0.25 / 3 = 1/3, std 0.577350; A = ±0.5 / 0.577350 = ±0.866025.
    adv, _ = group_normalize(torch.tensor([[1.0, 0, 0, 1]]), torch.ones(1, 4, dtype=torch.bool), EPS)
    torch.testing.assert_close(adv, torch.tensor([[0.866025, -0.866025, -0.866025, 0.866025]]), atol=2e-6, rtol=0)


def test_truncation_mask_none_keeps_truncated():
    # Response 3 is truncated (reward 0). 'none': same as the plain group: A = [1.5, -0.5, -0.5, -0.5].
    res = _run([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="none")
    torch.testing.assert_close(res.advantages, torch.tensor([[1.5, -0.5, -0.5, -0.5]]), atol=1e-5, rtol=0)
    assert res.loss_mask.tolist() == [[T, T, T, T]]


def test_truncation_mask_before_drops_truncated_from_statistics():
    # Statistics over [1, 0, 0] only: mean 1/3, squared deviations 4/9 + 1/9 + 1/9 = 2/3,
    # var = (2/3) / 2 = 1/3, std 0.577350: A = (2/3)/0.577350 = 1.154701, -(1/3)/0.577350 = -0.577350;
    # the truncated response gets A = 0 and leaves the loss.
    res = _run([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="before")
    torch.testing.assert_close(res.advantages, torch.tensor([[1.154701, -0.577350, -0.577350, 0.0]]), atol=1e-5, rtol=0)
    assert res.loss_mask.tolist() == [[T, T, T, F]]


def test_truncation_mask_after_uses_truncated_in_statistics_then_zeroes_it():
    # Statistics over all four (A = 1.5, -0.5, -0.5, -0.5), then the truncated one is zeroed and masked.
    res = _run([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="after")
    torch.testing.assert_close(res.advantages, torch.tensor([[1.5, -0.5, -0.5, 0.0]]), atol=1e-5, rtol=0)
    assert res.loss_mask.tolist() == [[T, T, T, F]]


def test_overlong_filter_equals_after_mask():
    a = _run([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="none", overlong_filter=True)
    b = _run([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="after")
    torch.testing.assert_close(a.advantages, b.advantages)
    assert a.loss_mask.tolist() == b.loss_mask.tolist() == [[T, T, T, F]]


def test_zero_advantage_groups_rejected_and_counted():
    # Groups: all correct, all wrong, mixed. Only the mixed one has a gradient.
    res = _run([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]], [[F] * 4] * 3)
    assert res.zero_groups.tolist() == [T, T, F]
    assert res.keep_groups.tolist() == [F, F, T]
    assert res.num_rejected == 2
    assert res.metrics["advantage/zero_groups"] == 2 and res.metrics["advantage/rejected_groups"] == 2
    assert (res.advantages[:2] == 0).all()          # exactly 0, not eps noise
    assert not res.loss_mask[:2].any() and res.loss_mask[2].all()   # rejected tokens never count in T
    kept = _run([[1, 1, 1, 1], [1, 0, 1, 0]], [[F] * 4] * 2, reject_zero_advantage=False)
    assert kept.keep_groups.tolist() == [T, T] and kept.zero_groups.tolist() == [T, F]
    assert kept.metrics["advantage/rejected_groups"] == 0 and kept.loss_mask.all()


def test_zero_advantage_after_masking():
    # 'before' with a single untruncated response: no Bessel std -> degenerate -> zero group.
    res = _run([[1, 0, 0, 0]], [[F, T, T, T]], truncation_mask="before")
    assert res.zero_groups.tolist() == [T] and (res.advantages == 0).all()
    # 'after' with every response truncated: statistics exist but every advantage is zeroed.
    res = _run([[1, 0, 1, 0]], [[T, T, T, T]], truncation_mask="after")
    assert res.zero_groups.tolist() == [T]


@pytest.mark.parametrize("length, expected", [
    (10, 0.0),     # well below L_max - L_cache = 16
    (16, 0.0),     # |y| = L_max - L_cache: still no penalty
    (17, -0.25),   # (16 - 17) / 4
    (18, -0.5),    # (16 - 18) / 4
    (20, -1.0),    # |y| = L_max: (16 - 20) / 4
    (25, -1.0),    # beyond L_max: -1
])
def test_overlong_penalty_boundaries(length, expected):
    # L_max = 20, L_cache = 4.
    assert overlong_penalty(torch.tensor([length]), 20, 4).item() == pytest.approx(expected)


def test_overlong_penalty_rejects_bad_cache():
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), 4, 8)


def test_overlong_shaping_enters_advantages():
    # raw [1, 1, 0, 0], lengths [10, 18, 17, 20], L_max 20, L_cache 4 -> r = [1, 0.5, -0.25, -1].
    # mean 0.0625; deviations 0.9375, 0.4375, -0.3125, -1.0625; squares sum 2.296875;
    # var = 2.296875 / 3 = 0.765625 -> std 0.875; A = [1.071429, 0.5, -0.357143, -1.214286].
    res = _run([[1, 1, 0, 0]], [[F, F, F, T]], lengths=[[10, 18, 17, 20]], max_len=20, overlong_cache=4)
    torch.testing.assert_close(res.rewards, torch.tensor([[1.0, 0.5, -0.25, -1.0]]))
    torch.testing.assert_close(res.advantages, torch.tensor([[1.071429, 0.5, -0.357143, -1.214286]]), atol=1e-5, rtol=0)
    assert res.metrics["reward/overlong_penalty_mean"] == pytest.approx(-1.75 / 4)
    with pytest.raises(ValueError, match="max_len"):
        _run([[1, 0]], [[F, F]], overlong_cache=4)


def test_reward_scale():
    torch.testing.assert_close(scale_rewards(torch.tensor([1.0, 0.0]), "binary"), torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(scale_rewards(torch.tensor([1.0, 0.0]), "signed"), torch.tensor([1.0, -1.0]))
    # Signed rewards give the same group advantages (affine invariance): [1, -1, -1, -1] -> 1.5, -0.5.
    res = _run([[1, 0, 0, 0]], [[F] * 4], reward_scale="signed")
    torch.testing.assert_close(res.advantages, torch.tensor([[1.5, -0.5, -0.5, -0.5]]), atol=1e-5, rtol=0)


def test_ragged_groups_with_present_mask():
    # [1, 0, pad, pad]: mean 0.5, var = 0.5 / 1, std 0.707107: A = ±0.707107; padding 0 and masked.
    res = _run([[1, 0, 0, 0]], [[F] * 4], present=[[T, T, F, F]])
    torch.testing.assert_close(res.advantages, torch.tensor([[0.707106, -0.707106, 0.0, 0.0]]), atol=1e-5, rtol=0)
    assert res.loss_mask.tolist() == [[T, T, F, F]]


def test_broadcast_to_tokens():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("estimator, expected", [
    # GRPO over [1, 0, 1]: mean 2/3, Bessel var (1/9 + 4/9 + 1/9) / 2 = 1/3, std 0.577350:
    # A = (1/3) / 0.577350 = 0.577350 and -(2/3) / 0.577350 = -1.154701.
    ("grpo", [0.577350, -1.154701, 0.577350, 0.0]),
    # RLOO over [1, 0, 1]: 1 - (0 + 1)/2 = 0.5, 0 - (1 + 1)/2 = -1.
    ("rloo", [0.5, -1.0, 0.5, 0.0]),
])
def test_garbage_rewards_in_padding_slots_never_leak(estimator, expected):
    # The padding slot of a ragged group holds NaN (second group: inf): the present responses'
    # statistics and advantages are as if it were not there, and it gets exactly 0.
    for garbage in (float("nan"), float("inf")):
        res = _run([[1, 0, 1, garbage]], [[F] * 4], present=[[T, T, T, F]], estimator=estimator)
        torch.testing.assert_close(res.advantages, torch.tensor([expected]), atol=1e-5, rtol=0)
        assert res.loss_mask.tolist() == [[T, T, T, F]] and res.keep_groups.tolist() == [T]
        assert res.metrics["reward/mean"] == pytest.approx(2 / 3)
        assert all(math.isfinite(v) for v in res.metrics.values())


def test_metrics_read_later_are_those_of_the_inputs_as_given():
    # metrics are computed when first read: a caller that reuses its input tensors meanwhile does not change them
    rewards, truncated, present = torch.tensor([[1.0, 0, 1, 0]]), torch.tensor([[T, F, F, F]]), torch.tensor([[T, T, T, F]])
    res = compute_advantages(rewards, torch.full((1, 4), 10), truncated, AdvantageConfig(), None, present)
    rewards.zero_()
    truncated.fill_(F)
    present.fill_(T)
    assert res.metrics["reward/mean"] == pytest.approx(2 / 3)
    assert res.metrics["response/truncated_frac"] == pytest.approx(1 / 3)
