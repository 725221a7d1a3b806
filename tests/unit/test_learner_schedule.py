"""Mini-batch schedule: N_SGD = (D_R / D_T) * N_reuse seeded, whole-group mini-batches."""

import pytest

from learner.config import BatchConfig
from learner.schedule import minibatch_schedule, schedule_for


@pytest.mark.parametrize("d_r, d_t, n_reuse, n_sgd", [
    (64, 64, 1, 1), (64, 32, 2, 4), (64, 64, 2, 2), (64, 16, 4, 16), (64, 64, 4, 4),
    (32, 32, 1, 1), (16, 16, 1, 1), (256, 64, 4, 16),          # the report's ablation grid
])
def test_num_sgd_updates(d_r, d_t, n_reuse, n_sgd):
    batch = BatchConfig(rollout_batch=d_r, mini_batch=d_t, n_reuse=n_reuse)
    assert batch.n_sgd == n_sgd and len(schedule_for(batch, seed=0)) == n_sgd


def test_divisibility_error_is_clear():
    with pytest.raises(ValueError, match="multiple of mini_batch D_T=24"):
        minibatch_schedule(64, 24, 1, seed=0)
    with pytest.raises(ValueError, match="multiple"):
        BatchConfig(rollout_batch=64, mini_batch=24)


def test_schedule_passes_cover_every_group_once():
    plans = minibatch_schedule(8, 4, 2, seed=0)
    assert [p.update_index for p in plans] == [0, 1, 2, 3]
    assert [p.pass_index for p in plans] == [0, 0, 1, 1]
    for p in (0, 1):
        groups = [g for plan in plans if plan.pass_index == p for g in plan.group_indices]
        assert sorted(groups) == list(range(8))
    assert all(len(p.group_indices) == 4 for p in plans)


def test_schedule_is_seeded():
    assert minibatch_schedule(16, 4, 3, seed=7) == minibatch_schedule(16, 4, 3, seed=7)
    assert minibatch_schedule(16, 4, 3, seed=7) != minibatch_schedule(16, 4, 3, seed=8)
    plans = minibatch_schedule(6, 3, 1, seed=0, shuffle=False)
    assert [p.group_indices for p in plans] == [(0, 1, 2), (3, 4, 5)]


def test_strict_on_policy_is_one_update_over_everything():
    batch = BatchConfig(rollout_batch=4, mini_batch=4, n_reuse=1)
    (plan,) = schedule_for(batch, seed=3)
    assert sorted(plan.group_indices) == [0, 1, 2, 3] and plan.pass_index == 0
