"""LearnerConfig: the lag policy's requirements (checked in one place), nested batch sizes, contradictions.
The lag union itself (string forms, the old keys): test_learner_lag_policy.py."""

import pytest

from learner.config import AdvantageConfig, BatchConfig, GuardConfig, PolicyLossConfig, PrimeConfig
from learner.lag_policy import Bounded, OnPolicy, lag_problems
from learner.trainer_config import LearnerConfig


def _problems(cfg: LearnerConfig) -> list[str]:
    return lag_problems(cfg.lag, cfg.batch, cfg.loss, cfg.sync_interval, cfg.guard)


@pytest.mark.parametrize("bad, problem", [
    (dict(batch=BatchConfig(n_reuse=2)), "n_reuse=2 (need 1: --learner.batch.n_reuse 1)"),
    (dict(batch=BatchConfig(mini_batch=32)), "mini_batch=32 != rollout_batch=64"),
    (dict(loss=PolicyLossConfig(eps_high=0.28)), "eps_low=0.2 != eps_high=0.28"),
    (dict(sync_interval=2), "sync_interval=2"),
])
def test_on_policy_is_strict(bad, problem):
    with pytest.raises(ValueError, match="strict on-policy") as exc:
        LearnerConfig(lag="on_policy", **bad)
    assert str(exc.value).count("--learner.lag on_policy (strict on-policy): ") == 1 and problem in str(exc.value)


def test_on_policy_symmetric_clip_need_not_be_0_2():
    cfg = LearnerConfig(lag="on_policy", loss=PolicyLossConfig(eps_low=0.1, eps_high=0.1))
    assert _problems(cfg) == []
    off = LearnerConfig(lag="bounded:4", batch=BatchConfig(n_reuse=4))
    assert _problems(off) == [] and _problems(off.model_copy(update={"lag": OnPolicy()})) == \
        ["n_reuse=4 (need 1: --learner.batch.n_reuse 1)"]


def test_every_problem_in_one_error():
    with pytest.raises(ValueError) as exc:
        LearnerConfig(batch=BatchConfig(mini_batch=16, n_reuse=2), loss=PolicyLossConfig(eps_high=0.28), sync_interval=2,
                      guard=GuardConfig(enabled=True))
    msg = str(exc.value)
    for problem in ("n_reuse=2", "mini_batch=16 != rollout_batch=64", "eps_low=0.2 != eps_high=0.28", "sync_interval=2",
                    "on-policy already"):
        assert problem in msg, (problem, msg)


def test_off_policy_needs_lag_and_divisible_batches():
    with pytest.raises(ValueError, match="bounded needs N >= 1"):
        LearnerConfig(lag="bounded:0")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        LearnerConfig(lag=Bounded(max_lag=1).model_dump() | {"max_lag": 0})
    with pytest.raises(ValueError, match="multiple"):
        LearnerConfig(lag="bounded:4", batch=BatchConfig(rollout_batch=64, mini_batch=24))
    cfg = LearnerConfig(lag="bounded:16", batch=BatchConfig(rollout_batch=64, mini_batch=16, n_reuse=4),
                        loss=PolicyLossConfig(eps_high=0.28), guard=GuardConfig(enabled=True), sync_interval=4)
    assert (cfg.batch.n_sgd, cfg.mode, cfg.max_lag, cfg.fixed_lag, cfg.versions_needed) == (16, "off_policy", 16, None, 1)


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


def test_fixed_lag_needs_one_update_per_step_and_no_guard():
    k2 = LearnerConfig(lag="fixed:2")
    assert (k2.versions_needed, _problems(k2), k2.mode, k2.max_lag, k2.fixed_lag) == (3, [], "off_policy", 2, 2)
    assert LearnerConfig(lag="fixed:0").versions_needed == 1 and LearnerConfig().versions_needed == 1
    for bad, problem in [
        (dict(batch=BatchConfig(mini_batch=16)), "one update per step"),
        (dict(batch=BatchConfig(n_reuse=2)), "--learner.batch.n_reuse 1"),
        (dict(sync_interval=4), "sync_interval=4"),
        (dict(guard=GuardConfig(enabled=True)), "switch the lag itself"),
    ]:
        with pytest.raises(ValueError, match="--learner.lag fixed:2 .every token at update lag exactly 2.") as exc:
            LearnerConfig(lag="fixed:2", **bad)
        assert problem in str(exc.value), (bad, str(exc.value))
    assert LearnerConfig(lag="fixed:2", loss=PolicyLossConfig(eps_high=0.28)).fixed_lag == 2   # clip is free at k >= 1


def test_fixed_lag_0_is_strict_on_policy():
    k0 = LearnerConfig(lag="fixed:0")
    assert (k0.mode, k0.max_lag, k0.fixed_lag, k0.lag.strict) == ("on_policy", 0, 0, True)
    with pytest.raises(ValueError, match=r"fixed:0 \(strict on-policy\): eps_low=0.2 != eps_high=0.28"):
        LearnerConfig(lag="fixed:0", loss=PolicyLossConfig(eps_high=0.28))
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        LearnerConfig(lag="fixed:-1")
    assert "update lag" in Bounded.model_fields["max_lag"].description      # says which lag it bounds
