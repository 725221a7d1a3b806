"""LearnerConfig: strict on-policy validation (its one home), nested batch sizes, contradictions."""

import pytest

from learner.config import AdvantageConfig, BatchConfig, PolicyLossConfig, PrimeConfig
from learner.trainer_config import LearnerConfig, strict_on_policy_problems


@pytest.mark.parametrize("bad, problem", [
    (dict(batch=BatchConfig(n_reuse=2)), "n_reuse=2 (need 1)"),
    (dict(batch=BatchConfig(mini_batch=32)), "mini_batch=32 != rollout_batch=64"),
    (dict(max_lag=1), "max_lag=1 (need 0)"),
    (dict(loss=PolicyLossConfig(eps_high=0.28)), "eps_low=0.2 != eps_high=0.28"),
    (dict(sync_interval=2), "sync_interval=2"),
])
def test_on_policy_is_strict(bad, problem):
    with pytest.raises(ValueError, match="strict on-policy") as exc:
        LearnerConfig(mode="on_policy", **bad)
    assert problem in str(exc.value)


def test_on_policy_symmetric_clip_need_not_be_0_2():
    cfg = LearnerConfig(mode="on_policy", loss=PolicyLossConfig(eps_low=0.1, eps_high=0.1))
    assert strict_on_policy_problems(cfg) == []
    off = LearnerConfig(mode="off_policy", max_lag=4, batch=BatchConfig(n_reuse=4))
    assert strict_on_policy_problems(off) == ["n_reuse=4 (need 1)", "max_lag=4 (need 0)"]


def test_off_policy_needs_lag_and_divisible_batches():
    with pytest.raises(ValueError, match="max_lag >= 1"):
        LearnerConfig(mode="off_policy", max_lag=0)
    with pytest.raises(ValueError, match="multiple"):
        LearnerConfig(mode="off_policy", max_lag=4, batch=BatchConfig(rollout_batch=64, mini_batch=24))
    cfg = LearnerConfig(mode="off_policy", max_lag=16, batch=BatchConfig(rollout_batch=64, mini_batch=16, n_reuse=4),
                        loss=PolicyLossConfig(eps_high=0.28))
    assert cfg.batch.n_sgd == 16


def test_contradictions_are_rejected():
    with pytest.raises(ValueError, match="dynamic_sampling"):
        LearnerConfig(advantage=AdvantageConfig(reject_zero_advantage=False))
    with pytest.raises(ValueError):
        LearnerConfig(zero_stage=4)


def test_prime_filter_needs_dynamic_sampling():
    assert LearnerConfig(prime=PrimeConfig()).prime.beta == 0.05
    with pytest.raises(ValueError, match="dynamic_sampling"):
        LearnerConfig(prime=PrimeConfig(), dynamic_sampling=False,
                      advantage=AdvantageConfig(reject_zero_advantage=False))


def test_fixed_lag_needs_one_update_per_step_and_a_mode_that_says_k():
    from learner.config import GuardConfig
    from learner.trainer_config import fixed_lag_problems

    k2 = LearnerConfig(mode="off_policy", max_lag=2, fixed_lag=2)
    assert (k2.versions_needed, fixed_lag_problems(k2)) == (3, [])
    assert LearnerConfig(fixed_lag=0).versions_needed == 1 and LearnerConfig().versions_needed == 1
    for bad, problem in [
        (dict(mode="off_policy", max_lag=3), "--learner.max_lag 2"),
        (dict(mode="on_policy", max_lag=0), "--learner.mode off_policy"),
        (dict(mode="off_policy", max_lag=2, batch=BatchConfig(mini_batch=16)), "one update per step"),
        (dict(mode="off_policy", max_lag=2, batch=BatchConfig(n_reuse=2)), "--learner.batch.n_reuse 1"),
        (dict(mode="off_policy", max_lag=2, sync_interval=4), "sync_interval=4"),
        (dict(mode="off_policy", max_lag=2, guard=GuardConfig(enabled=True)), "guard"),
    ]:
        with pytest.raises(ValueError, match="fixed_lag=2") as exc:
            LearnerConfig(fixed_lag=2, **bad)
        assert problem in str(exc.value), (bad, str(exc.value))
    with pytest.raises(ValueError, match="strict on-policy: --learner.mode on_policy"):
        LearnerConfig(mode="off_policy", max_lag=1, fixed_lag=0)
    with pytest.raises(ValueError):
        LearnerConfig(fixed_lag=-1)
    assert "update lag" in LearnerConfig.model_fields["max_lag"].description      # says which lag it bounds
