"""A step's rollout statistics, by hand: which responses count, the length of the uncut ones, tokens generated."""

import math

import numpy as np
import pytest

from buffer.messages import Group, Response
from learner.step_metrics import rollout_stats


def _response(length: int, reward: float, finish: str = "stop") -> Response:
    return Response(np.zeros(length, np.int32), np.zeros(length, np.float32), finish, 0, 0, reward)


def _group(*responses: Response, stage: int = 0) -> Group:
    return Group("g", "g", "s", 0, np.array([1], np.int32), "1", list(responses), "a", stage=stage)


def test_rollout_stats_by_hand():
    # read: 10 (correct), 64 cut, 20, 64 cut; the stale 30 is not read (present False) and counts nowhere
    groups = [_group(_response(10, 1.0), _response(64, 0.0, "length"), _response(30, 1.0)),
              _group(_response(20, 0.0), _response(64, 0.0, "length"), stage=1)]
    present = [np.array([True, True, False]), np.array([True, True])]
    m = rollout_stats(groups, present)
    assert m["reward/mean"] == pytest.approx(0.25) and m["reward/accuracy"] == pytest.approx(0.25)
    assert m["length/mean"] == pytest.approx((10 + 64 + 20 + 64) / 4) and m["length/max"] == 64
    assert m["length/uncut_mean"] == pytest.approx((10 + 20) / 2)       # the two cut at 64 left out
    assert m["truncation/rate"] == pytest.approx(0.5) and m["tokens/generated"] == 10 + 64 + 20 + 64
    assert m["stage"] == 1


def test_every_response_cut_has_no_uncut_length():
    m = rollout_stats([_group(_response(64, 0.0, "length"), _response(64, 1.0, "length"))], [np.array([True, True])])
    assert math.isnan(m["length/uncut_mean"]) and m["length/mean"] == 64 and m["tokens/generated"] == 128


def test_nothing_read_is_nan_and_no_tokens():
    m = rollout_stats([_group(_response(10, 1.0))], [np.array([False])])
    assert math.isnan(m["length/mean"]) and math.isnan(m["length/uncut_mean"]) and math.isnan(m["reward/mean"])
    assert m["tokens/generated"] == 0.0 and m["length/max"] == 0.0
