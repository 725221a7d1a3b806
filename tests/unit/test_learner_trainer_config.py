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
