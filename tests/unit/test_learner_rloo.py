"""RLOO advantages: leave-one-out baseline, ragged groups, truncation masks, rejection, config switch."""

import pytest
import torch
from pydantic import ValidationError

from learner.advantages import compute_advantages
from learner.config import AdvantageConfig
from learner.rloo import leave_one_out

T, F = True, False


def _rloo(rewards, truncated=None, lengths=None, max_len=None, present=None, **cfg):
    r = torch.tensor(rewards, dtype=torch.float32)
    truncated = torch.tensor(truncated if truncated is not None else [[F] * r.shape[1]] * r.shape[0])
    lengths = torch.tensor(lengths) if lengths is not None else torch.full(r.shape, 10)
    pres = None if present is None else torch.tensor(present)
    return compute_advantages(r, lengths, truncated, AdvantageConfig(estimator="rloo", **cfg), max_len, pres)


def test_leave_one_out_hand_values():
    # K = 4, r = [1, 0, 0, 0]: A_0 = 1 - (0+0+0)/3 = 1; A_j = 0 - (1+0+0)/3 = -1/3.
    adv, degenerate = leave_one_out(torch.tensor([[1.0, 0, 0, 0]]), torch.ones(1, 4, dtype=torch.bool))
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3]]))
    assert not degenerate.item()
    # K = 4, r = [1, 0, 1, 0]: A = 1 - (0+1+0)/3 = 2/3 and 0 - (1+1+0)/3 = -2/3.
    adv, _ = leave_one_out(torch.tensor([[1.0, 0, 1, 0]]), torch.ones(1, 4, dtype=torch.bool))
    torch.testing.assert_close(adv, torch.tensor([[2 / 3, -2 / 3, 2 / 3, -2 / 3]]))
    # K = 3, r = [0.5, 0.2, -0.4]: A_0 = 0.5 - (0.2-0.4)/2 = 0.6; A_1 = 0.2 - (0.5-0.4)/2 = 0.15;
    # A_2 = -0.4 - (0.5+0.2)/2 = -0.75 (sums to 0).
    adv, _ = leave_one_out(torch.tensor([[0.5, 0.2, -0.4]]), torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.15, -0.75]]))


def test_leave_one_out_equals_loop_and_scaled_centering():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(5, 6, generator=g)
    present = torch.rand(5, 6, generator=g) > 0.3
    present[:, :2] = True                         # at least 2 members per group
    adv, _ = leave_one_out(rewards, present)
    for gi in range(5):
        members = [j for j in range(6) if present[gi, j]]
        for i in members:
            others = [rewards[gi, j].item() for j in members if j != i]
            assert adv[gi, i].item() == pytest.approx(rewards[gi, i].item() - sum(others) / len(others), abs=1e-6)
        k = len(members)
        mean = sum(rewards[gi, j].item() for j in members) / k
        for i in members:                          # A_i = K/(K-1) (r_i - mean)
            assert adv[gi, i].item() == pytest.approx(k / (k - 1) * (rewards[gi, i].item() - mean), abs=1e-6)


def test_degenerate_groups_are_exactly_zero():
    # all equal (0.1 is not exact in binary: r - mean of others could be eps noise), or one member
    adv, degenerate = leave_one_out(torch.tensor([[0.1, 0.1, 0.1], [1.0, 0.0, 0.0]]),
                                    torch.tensor([[T, T, T], [T, F, F]]))
    assert degenerate.tolist() == [T, T] and (adv == 0).all()


def test_compute_advantages_rloo_and_zero_group_rejection():
    res = _rloo([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    torch.testing.assert_close(res.advantages[2], torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    assert res.zero_groups.tolist() == [T, T, F] and res.keep_groups.tolist() == [F, F, T]
    assert (res.advantages[:2] == 0).all() and not res.loss_mask[:2].any() and res.loss_mask[2].all()
    kept = _rloo([[1, 1, 1, 1], [1, 0, 1, 0]], reject_zero_advantage=False)
    assert kept.keep_groups.tolist() == [T, T] and kept.loss_mask.all()


def test_ragged_group_uses_present_count():
    # present [T, T, T, F]: K = 3 over [1, 0, 0]: A = [1, -(1+0)/2, -(1+0)/2] = [1, -0.5, -0.5]; pad 0.
    res = _rloo([[1, 0, 0, 1]], present=[[T, T, T, F]])
    torch.testing.assert_close(res.advantages, torch.tensor([[1.0, -0.5, -0.5, 0.0]]))
    assert res.loss_mask.tolist() == [[T, T, T, F]]


def test_truncation_masks_with_rloo():
    # 'before': statistics over [1, 0, 0] (K = 3): [1, -0.5, -0.5]; the truncated one 0 and masked.
    res = _rloo([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="before")
    torch.testing.assert_close(res.advantages, torch.tensor([[1.0, -0.5, -0.5, 0.0]]))
    assert res.loss_mask.tolist() == [[T, T, T, F]]
    # 'after': statistics over all four (K = 4): [1, -1/3, -1/3, -1/3], then the truncated one zeroed.
    res = _rloo([[1, 0, 0, 0]], [[F, F, F, T]], truncation_mask="after")
    torch.testing.assert_close(res.advantages, torch.tensor([[1.0, -1 / 3, -1 / 3, 0.0]]))
    assert res.loss_mask.tolist() == [[T, T, T, F]]


def test_rloo_with_overlong_shaping():
    # raw [1, 1, 0, 0], lengths [10, 18, 17, 20], L_max 20, L_cache 4 -> r = [1, 0.5, -0.25, -1].
    # A_0 = 1 - (0.5 - 0.25 - 1)/3 = 1.25;        A_1 = 0.5 - (1 - 0.25 - 1)/3 = 0.583333;
    # A_2 = -0.25 - (1 + 0.5 - 1)/3 = -0.416667;  A_3 = -1 - (1 + 0.5 - 0.25)/3 = -1.416667.
    res = _rloo([[1, 1, 0, 0]], [[F, F, F, T]], lengths=[[10, 18, 17, 20]], max_len=20, overlong_cache=4)
    torch.testing.assert_close(res.advantages, torch.tensor([[1.25, 0.583333, -0.416667, -1.416667]]),
                               atol=1e-5, rtol=0)


def test_rloo_is_not_scale_invariant():
    # signed rewards [1, -1, -1, -1]: A_0 = 1 - (-1) = 2, A_j = -1 - (1 - 2)/3 = -2/3 (twice binary).
    res = _rloo([[1, 0, 0, 0]], reward_scale="signed")
    torch.testing.assert_close(res.advantages, torch.tensor([[2.0, -2 / 3, -2 / 3, -2 / 3]]))


def test_estimator_config():
    assert AdvantageConfig().estimator == "grpo"
    with pytest.raises(ValidationError):
        AdvantageConfig(estimator="ppo")
    # grpo and rloo differ on the same group: GRPO [1.5, -0.5, ...] vs RLOO [1, -1/3, ...]
    r, z = torch.tensor([[1.0, 0, 0, 0]]), torch.zeros(1, 4, dtype=torch.bool)
    grpo = compute_advantages(r, torch.full((1, 4), 5), z, AdvantageConfig())
    torch.testing.assert_close(grpo.advantages, torch.tensor([[1.5, -0.5, -0.5, -0.5]]), atol=1e-5, rtol=0)
