"""A step's critical path (``learner.step_path``): hop times from the groups, segments that add up to the step."""

from __future__ import annotations

import math

import pytest

from buffer.codec import decode_group, encode_group
from buffer.keys import entry_time
from buffer.messages import InvalidMessage
from learner.step_path import CHAIN, StepTimes, group_hops, hop_shares, path_metrics
from bench.synthetic import make_group

# two groups of one step (unix seconds); the version's publish started at 100.0 and landed at 100.5
G1 = {"issued": 99.0, "taken": 100.6, "loaded": 100.7, "started": 100.8, "generated": 101.5, "scored": 101.6}
G2 = {"issued": 99.5, "taken": 100.6, "loaded": 100.9, "started": 101.0, "generated": 102.5, "scored": 102.7}


def _step() -> StepTimes:
    g1, g2 = make_group("g1", n=2, tokens=5), make_group("g2", n=2, tokens=10)
    g1.trace, g2.trace = dict(G1), dict(G2)
    hops = [group_hops("101700-0", g1, read_at=101.8), group_hops("102800-3", g2, read_at=103.0)]
    return StepTimes(anchor=100.0, published=100.5, read=103.0, trained=104.0, groups=hops)


def test_entry_time_is_the_ids_milliseconds():
    assert entry_time("101700-0") == 101.7 and entry_time("1700000000123-7") == 1700000000.123
    assert entry_time("not-an-id") == 0.0


def test_hops_first_and_last_relative_to_the_publish():
    m = path_metrics(_step())
    expected = {"issued": (-1.0, -0.5), "taken": (0.6, 0.6), "loaded": (0.7, 0.9), "started": (0.8, 1.0),
                "generated": (1.5, 2.5), "scored": (1.6, 2.7), "written": (1.7, 2.8)}
    for hop, (first, last) in expected.items():
        assert m[f"path/{hop}_first"] == pytest.approx(first) and m[f"path/{hop}_last"] == pytest.approx(last)
    assert (m["path/published"], m["path/read"], m["path/trained"]) == pytest.approx((0.5, 3.0, 4.0))
    assert m["path/gen_phase"] == pytest.approx(2.5)             # read - published
    assert (m["path/groups"], m["path/tokens"]) == (2.0, 30.0)


def test_segments_are_the_critical_path_and_sum_to_the_step():
    m = path_metrics(_step())
    # running maximum of each hop's last time: prompts issued before the publish cost the path nothing
    expected = {"publish": 0.5, "load": 0.4, "issue": 0.0, "take": 0.0, "start": 0.1, "generate": 1.5,
                "score": 0.2, "write": 0.1, "read": 0.2, "train": 1.0}
    assert [name for name, _ in CHAIN] == list(expected)
    assert {k: m[f"path/seg/{k}"] for k in expected} == pytest.approx(expected)
    assert sum(m[f"path/seg/{k}"] for k in expected) == pytest.approx(m["path/trained"])


def test_a_step_without_traced_groups_or_publish_still_has_its_read_and_train():
    m = path_metrics(StepTimes(anchor=10.0, published=math.nan, read=12.0, trained=13.5))
    assert m["path/seg/read"] == pytest.approx(2.0) and m["path/seg/train"] == pytest.approx(1.5)
    assert "path/seg/publish" not in m and "path/generated_last" not in m
    assert m["path/gen_phase"] == pytest.approx(2.0) and m["path/groups"] == 0.0


def test_trace_round_trips_and_is_absent_when_not_recorded():
    g = make_group("g", n=2, tokens=3)
    assert decode_group(encode_group(g)).trace == {} and b"trace" not in encode_group(g)
    g.trace = dict(G1)
    assert decode_group(encode_group(g)).trace == G1


@pytest.mark.parametrize("trace", [{"issued": math.nan}, {"issued": "soon"}, {str(i): 1.0 for i in range(33)}])
def test_a_bad_trace_is_rejected_with_a_reason(trace):
    g = make_group("g", n=2, tokens=3)
    g.trace = trace
    with pytest.raises(InvalidMessage) as err:
        decode_group(encode_group(g))
    assert err.value.reason == "bad_field"


def test_hop_shares_are_medians_of_each_segment_over_the_path():
    rows = [{"path/trained": 2.0, "path/seg/generate": 1.0, "path/seg/train": 1.0},
            {"path/trained": 4.0, "path/seg/generate": 3.0, "path/seg/train": 1.0},
            {"path/trained": 1.0, "path/seg/generate": 0.8, "path/seg/train": 0.2},
            {"step": 9}]                                        # no trace: left out
    shares = hop_shares(rows)
    assert list(shares) == [name for name, _ in CHAIN]
    assert shares["generate"] == pytest.approx(0.75)            # median of 0.5, 0.75, 0.8
    assert shares["train"] == pytest.approx(0.25)               # median of 0.5, 0.25, 0.2
    assert shares["publish"] == 0.0
    assert hop_shares([{"step": 0}]) == {}
