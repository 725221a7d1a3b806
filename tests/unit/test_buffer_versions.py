"""Pure version/lag helpers, key names and config bounds (no Redis)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from buffer.config import BufferConfig
from buffer.keys import RunKeys, run_id_of
from buffer.scripts import id_key, id_score
from buffer.versions import StepClock, fixed_lag_required, group_lags, lag_histogram
from bench.synthetic import make_group


def test_strict_on_policy_needs_exactly_the_steps_version():
    clock = StepClock(updates_per_step=1, max_lag=0)
    assert [clock.min_version(s) for s in range(4)] == [0, 1, 2, 3]
    assert [clock.newest_admissible_step(v) for v in range(4)] == [0, 1, 2, 3]


def test_off_policy_admission():
    # N_SGD = 4 updates per step, max_lag 6: step 5 needs version >= 20 - 6 = 14
    clock = StepClock(updates_per_step=4, max_lag=6)
    assert clock.min_version(5) == 14 and clock.min_version(1) == 0
    # the feeder's inverse: the newest step admissible at a version
    assert clock.newest_admissible_step(14) == 5 and clock.newest_admissible_step(13) == 4
    assert all(clock.min_version(clock.newest_admissible_step(v)) <= v < clock.min_version(clock.newest_admissible_step(v) + 1)
               for v in range(40))
    assert [clock.step_at(v) for v in (0, 3, 4, 17)] == [0, 0, 1, 4]
    assert StepClock(updates_per_step=4, max_lag=100).min_version(1) == 0
    with pytest.raises(ValueError):
        StepClock(updates_per_step=0)


def test_a_clock_published_mid_run():
    """The guard switched to strict on-policy at step 7, version 28 (after 7 steps of 4 updates)."""
    clock = StepClock(step=7, version=28, updates_per_step=1, max_lag=0)
    assert [clock.start_version(s) for s in (7, 8, 10)] == [28, 29, 31]
    assert [clock.min_version(s) for s in (7, 8)] == [28, 29]
    assert clock.step_at(28) == 7 and clock.step_at(30) == 9 and clock.newest_admissible_step(29) == 8
    assert clock.step_at(20) == 7 and clock.newest_admissible_step(20) == 7    # published version behind it
    with pytest.raises(ValueError, match="before this clock"):
        clock.min_version(6)
    assert StepClock(**clock.to_dict()) == clock


def test_fixed_lag_pins_each_step_to_exactly_k_versions_back():
    # k = 2, one update per step: step s is pinned to version s - 2 (the ramp-in: steps 0..2 to version 0)
    clock = StepClock(updates_per_step=1, max_lag=2, fixed_lag=2)
    assert [clock.pin_version(s) for s in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [clock.pin_version(s) == clock.min_version(s) for s in range(6)] == [True] * 6
    assert clock.newest_admissible_step(3) == 5          # step 5's version 3 exists: issued
    # the ramp-in: trained at version v < k the data (from version 0) is v behind, else exactly k
    assert [fixed_lag_required(v, 2) for v in range(5)] == [0, 1, 2, 2, 2]
    # a clock re-anchored after a skipped update (step 6 at version 5): pins follow the versions
    later = StepClock(step=6, version=5, updates_per_step=1, max_lag=2, fixed_lag=2)
    assert [later.pin_version(s) for s in (6, 7)] == [3, 4] and StepClock(**later.to_dict()) == later
    assert StepClock(updates_per_step=1, max_lag=2).pin_version(4) is None           # not pinned
    for bad in ({"max_lag": 3, "fixed_lag": 2}, {"max_lag": 2, "fixed_lag": 2, "updates_per_step": 4},
                {"max_lag": 0, "fixed_lag": 0}):
        with pytest.raises(ValueError):
            StepClock(**bad)


def test_group_lags_and_histogram():
    g = make_group("g", n=3, tokens=2, version=4)
    g.responses[2].version_start = 2
    lags = group_lags(g, learner_version=5)
    assert lags.dtype == np.int64 and lags.tolist() == [1, 1, 3]
    assert lag_histogram([g, make_group("h", n=2, version=5)], 5) == {0: 2, 1: 2, 3: 1}


def test_run_keys():
    k = RunKeys("run1")
    assert (k.prompts, k.groups, k.metrics, k.deadletter, k.version, k.actors, k.meta, k.consumed) == (
        "run1:prompts", "run1:groups", "run1:metrics", "run1:deadletter", "run1:version", "run1:actors",
        "run1:meta", "run1:consumed")
    assert str(k.group_stream) == "run1:groups" and k.group_stream.group == "learner"
    assert all(key.startswith("run1:") for key in k.all())
    assert run_id_of(b"run1:groups") == "run1" and run_id_of("nocolon") is None
    for bad in ("", "a:b", "a b", "x*", "a" * 65):
        with pytest.raises(ValueError):
            RunKeys(bad)


def test_stream_id_order_helpers():
    assert id_key("10-2") < id_key("10-10") < id_key("11-0")
    assert id_score("1795356203535-7") == 1795356203535 * 1000 + 7
    assert float(id_score("1795356203535-7")) == id_score("1795356203535-7")   # exact in a double


def test_config_is_bounded_and_strict():
    assert BufferConfig().appendfsync == "everysec"
    with pytest.raises(ValidationError):
        BufferConfig(max_unconsumed_groups=0)
    with pytest.raises(ValidationError):
        BufferConfig(appendfsync="sometimes")
    with pytest.raises(ValidationError):
        BufferConfig(unknown_knob=1)
    for name, field in BufferConfig.model_fields.items():
        assert field.description, name
