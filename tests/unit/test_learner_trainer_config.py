"""LearnerConfig: strict on-policy validation, knob precedence, derived values."""

import pytest

from learner.config import AdvantageConfig, PolicyLossConfig
from learner.trainer_config import LearnerConfig


@pytest.mark.parametrize("bad", [dict(n_reuse=2), dict(mini_batch=32), dict(max_lag=1),
                                 dict(loss=PolicyLossConfig(eps_high=0.28)), dict(sync_interval=2)])
def test_on_policy_is_strict(bad):
    with pytest.raises(ValueError, match="strict on-policy"):
        LearnerConfig(mode="on_policy", **bad)


def test_off_policy_needs_lag_and_divisible_batches():
    with pytest.raises(ValueError, match="max_lag >= 1"):
        LearnerConfig(mode="off_policy", max_lag=0)
    with pytest.raises(ValueError, match="multiple"):
        LearnerConfig(mode="off_policy", max_lag=4, rollout_batch=64, mini_batch=24)
    cfg = LearnerConfig(mode="off_policy", max_lag=16, rollout_batch=64, mini_batch=16, n_reuse=4,
                        loss=PolicyLossConfig(eps_high=0.28))
    assert cfg.n_sgd == 16 and cfg.batch.n_sgd == 16


def test_temperature_and_old_logprobs_reach_the_loss_config():
    assert LearnerConfig(temperature=0.6).loss.temperature == 0.6
    assert LearnerConfig(loss=PolicyLossConfig(temperature=0.6)).temperature == 0.6
    assert LearnerConfig(old_logprobs="recompute").loss.old_logprobs == "recompute"
    cfg = LearnerConfig()
    cfg.temperature = 0.7                                   # validate_assignment re-syncs
    assert cfg.loss.temperature == 0.7
    data = cfg.model_dump()
    data["temperature"] = 0.6                               # preset edit: top level wins
    assert LearnerConfig.model_validate(data).loss.temperature == 0.6


def test_contradictions_are_rejected():
    with pytest.raises(ValueError, match="dynamic_sampling"):
        LearnerConfig(advantage=AdvantageConfig(reject_zero_advantage=False))
    with pytest.raises(ValueError, match="max_response_tokens"):
        LearnerConfig(advantage=AdvantageConfig(overlong_cache=4))
    with pytest.raises(ValueError):
        LearnerConfig(zero_stage=4)
