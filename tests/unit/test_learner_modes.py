"""The step's mode: configured, or the guard's strict on-policy fallback with the run's rollout batch."""

import pytest

from learner.config import BatchConfig, GuardConfig, PolicyLossConfig
from learner.modes import configured_mode, fallback_mode, mode_for
from learner.lag_policy import OnPolicy, lag_problems
from learner.trainer_config import LearnerConfig


def _off_policy(**kw) -> LearnerConfig:
    return LearnerConfig(lag="bounded:16", batch=BatchConfig(rollout_batch=64, mini_batch=16, n_reuse=4),
                         loss=PolicyLossConfig(eps_low=0.2, eps_high=0.28), **kw)


def test_fallback_is_strict_on_policy_with_the_runs_rollout_batch():
    cfg = _off_policy()
    fb = fallback_mode(cfg)
    assert fb.name == "on_policy" and fb.strict and fb.guard_fallback and fb.max_lag == 0
    assert (fb.batch.rollout_batch, fb.batch.mini_batch, fb.batch.n_reuse, fb.batch.n_sgd) == (64, 64, 1, 1)
    assert (fb.loss.eps_low, fb.loss.eps_high) == (0.2, 0.2)
    # exactly what the strict on-policy rule asks of a configured run
    assert lag_problems(OnPolicy(), fb.batch, fb.loss, cfg.sync_interval, GuardConfig()) == []


def test_mode_for_the_guards_answer():
    cfg = _off_policy(guard=GuardConfig(enabled=True))
    assert mode_for(cfg, "off_policy") == configured_mode(cfg)
    assert mode_for(cfg, "on_policy") == fallback_mode(cfg)
    on = LearnerConfig()                                    # configured on-policy: never a fallback
    assert mode_for(on, "on_policy") == configured_mode(on) and not configured_mode(on).guard_fallback


def test_clock_of_a_mode():
    cfg = _off_policy()
    off, fb = configured_mode(cfg).clock(7, 112), fallback_mode(cfg).clock(7, 112)
    assert (off.updates_per_step, off.max_lag, off.min_version(8)) == (16, 16, 112)
    assert (fb.updates_per_step, fb.max_lag, fb.min_version(8)) == (1, 0, 113)


def test_guard_only_watches_off_policy_runs():
    with pytest.raises(ValueError, match="on-policy already"):
        LearnerConfig(lag="on_policy", guard=GuardConfig(enabled=True))


def test_fixed_lag_mode_requires_exactly_k_after_the_ramp_in():
    mode = configured_mode(LearnerConfig(lag="fixed:2"))
    assert mode.pinned and not mode.strict and mode.fixed_lag == 2
    assert [mode.required_lag(v) for v in range(5)] == [0, 1, 2, 2, 2]
    clock = mode.clock(3, 3)
    assert (clock.fixed_lag, clock.pin_version(3), clock.pin_version(5)) == (2, 1, 3)
    strict = configured_mode(LearnerConfig(lag="fixed:0"))          # lag 0 is strict on-policy: not pinned
    assert strict.strict and not strict.pinned and strict.required_lag(7) == 0 and strict.clock(0, 0).fixed_lag is None
    assert configured_mode(_off_policy()).required_lag(9) is None


def test_sync_mode_trains_many_updates_on_a_batch_sampled_at_the_steps_start_version():
    # (4, 64, 16): 16 updates a step; prompts of step s wait for exactly the version step s starts at
    cfg = LearnerConfig(lag="sync", batch=BatchConfig(rollout_batch=64, mini_batch=16, n_reuse=4),
                        loss=PolicyLossConfig(eps_low=0.2, eps_high=0.28))
    mode = configured_mode(cfg)
    assert (mode.name, mode.max_lag, mode.strict, mode.pinned, mode.required_lag(5)) == ("off_policy", 0, False, False, None)
    clock = mode.clock(7, 112)
    assert (clock.updates_per_step, clock.min_version(7), clock.min_version(8)) == (16, 112, 128)
    assert clock.newest_admissible_step(127) == 7 and clock.newest_admissible_step(128) == 8
    assert mode_for(cfg, "on_policy") == fallback_mode(cfg)      # its guard falls back like bounded:N's
