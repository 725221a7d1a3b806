"""RewardConfig: typed, bounded, documented, strict about unknown keys."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rewards.config import RewardConfig
from rewards.cpus import usable_cpus


def test_every_field_is_documented():
    for name, field in RewardConfig.model_fields.items():
        assert field.description and len(field.description) > 20, name


@pytest.mark.parametrize("bad", [
    {"math_timeout_s": 0}, {"math_timeout_s": -1}, {"code_memory_mb": 1}, {"code_test_timeout_s": 0},
    {"worker_num_cpus": 0}, {"num_workers": 0}, {"max_output_bytes": 10}, {"signed_rewards": True},
])
def test_rejects_out_of_bounds_and_unknown_keys(bad):
    with pytest.raises(ValidationError):
        RewardConfig(**bad)


def test_defaults_and_helpers():
    cfg = RewardConfig()
    assert cfg.failure_reward == 0.0 and RewardConfig(signed_reward=True).failure_reward == -1.0
    assert cfg.resolved_num_workers() == usable_cpus()        # tests/unit/test_rewards_cpus.py
    assert RewardConfig(num_workers=3).resolved_num_workers() == 3
    assert cfg.worker_num_cpus == 0.25
    assert RewardConfig.model_validate_json(cfg.model_dump_json()) == cfg
    with pytest.raises(ValidationError):
        cfg.math_timeout_s = -5  # validated on assignment too
