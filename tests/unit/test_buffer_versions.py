"""Pure version/lag helpers, key names and config bounds (no Redis)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from buffer.config import BufferConfig
from buffer.keys import RunKeys, run_id_of
from buffer.scripts import id_key, id_score
from buffer.versions import group_lags, lag_histogram, learner_step_at, min_version_for_step, newest_admissible_step
from tests.samples import make_group


def test_strict_on_policy_needs_exactly_the_steps_version():
    assert [min_version_for_step(s, 1, 0) for s in range(4)] == [0, 1, 2, 3]
    assert [newest_admissible_step(v, 1, 0) for v in range(4)] == [0, 1, 2, 3]


def test_off_policy_admission():
    # N_SGD = 4 updates per step, max_lag 6: step 5 needs version >= 20 - 6 = 14
    assert min_version_for_step(5, 4, 6) == 14
    # the feeder's inverse: the newest step admissible at a version
    assert newest_admissible_step(14, 4, 6) == 5 and newest_admissible_step(13, 4, 6) == 4
    assert all(min_version_for_step(newest_admissible_step(v, 4, 6), 4, 6) <= v
               < min_version_for_step(newest_admissible_step(v, 4, 6) + 1, 4, 6) for v in range(40))
    assert min_version_for_step(1, 4, 100) == 0
    assert [learner_step_at(v, 4) for v in (0, 3, 4, 17)] == [0, 0, 1, 4]
    with pytest.raises(ValueError):
        min_version_for_step(1, 0, 0)
    with pytest.raises(ValueError):
        newest_admissible_step(-1, 4, 0)


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
