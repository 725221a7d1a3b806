"""The collective protocol end to end on gloo, without a vLLM engine: this process is learner rank 0,
spawned processes are the members (``bench.stub_members``: lagrl's real weight-transfer engine
receive path into a recording model). Faults: a member SIGKILLed while idle, one SIGKILLed
mid-broadcast, a restarted member caught up, a member whose loader always fails (the version
raises after max_attempts), no member at all, and one SIGKILLed after the learner's "go", before
it joined the group (the group's set-up waits for it: named at stale_after_s, not at the 300 s
collective timeout). Each failure must end within its deadline with an
error naming the member, and the survivors must hold exactly the weights sent.
"""

from __future__ import annotations

import signal
import time

import pytest

from actors.transport.config import CollectiveConfig
from actors.transport import WeightTransferError
from tests.collective_members import Rank0, checksums, weights

pytestmark = pytest.mark.integration

CFG = CollectiveConfig(backend="gloo", bucket_mb=1, join_timeout_s=20.0, collective_timeout_s=10.0,
                       heartbeat_s=0.2, stale_after_s=1.5, max_attempts=3)


@pytest.fixture
def learner():
    lr = Rank0(CFG)
    yield lr
    lr.close()


def test_versions_faults_catch_up_and_max_attempts(learner):
    lr = learner
    lr.spawn("A", die_at=(3, 0))            # A dies loading bucket 0 of version 3 (of 5 buckets)
    lr.spawn("B")
    lr.wait_live(["A", "B"])

    # v1: one group of learner + A + B, five buckets, exact weights at both
    [out] = lr.publish(1)
    assert out["errors"] == 0 and out["groups_formed"] == 1 and out["members"] == 2
    assert out["events"] == ["version 1: group 1 formed with A (rank 1), B (rank 2) (gloo, 5 buckets)"]
    assert lr.received("A", 1) == lr.received("B", 1) == checksums(1)

    # B dies while idle: v2's first attempt ends once B's heartbeat is stale (not after join_timeout),
    # naming it; the retry re-forms the group with A alone
    lr.kill("B")
    t0 = time.monotonic()
    first, second = lr.publish(2)
    assert time.monotonic() - t0 < 10.0
    assert first["retry"] and first["errors"] == 1
    assert "version 2, group 1: not ready within 20 s: missing B (rank 2, last heartbeat" in first["events"][0]
    assert second["events"] == ["version 2: group 2 formed with A (rank 1) (gloo, 5 buckets; B left)"]
    assert not second["retry"] and lr.received("A", 2) == checksums(2)

    # B comes back (a new incarnation): the learner sees it lacks v2 and catches it up alone
    lr.spawn("B")
    lr.wait_live(["B"])
    assert lr.transport.learner_status()["pending"]
    [catch] = lr.publish(2, catch_up=True)
    assert catch["events"] == ["version 2: group 3 formed with B (rank 1) (gloo, 5 buckets; B restarted) [catch-up]"]
    assert lr.received("B", 2) == checksums(2)
    assert not lr.transport.learner_status()["pending"]

    # v3: A dies in the middle of the broadcast. The learner's broadcast fails fast, the error
    # names A; B's receive fails too, before the last bucket (its engine is mixed, so it reports
    # consistent=False, until the retry completes)
    t0 = time.monotonic()
    outcomes = lr.publish(3)
    assert time.monotonic() - t0 < 15.0
    assert [o["errors"] for o in outcomes] == [1, 0]
    assert outcomes[0]["events"][0] == \
        "version 3: group 4 formed with A (rank 1), B (rank 2) (gloo, 5 buckets; A rejoined)"
    assert "version 3, group 4: broadcast failed: missing A (rank 1, last heartbeat" in outcomes[0]["events"][1]
    assert outcomes[1]["events"] == ["version 3: group 5 formed with B (rank 1) (gloo, 5 buckets; A left)"]
    assert lr.received("B", 3) == checksums(3)
    errors = [lr.hub.get_json(f"test/B/error/{i}") for i in (1, 2, 3) if lr.hub.has(f"test/B/error/{i}")]
    assert errors and errors[0]["consistent"] is False and "receiving version 3" in errors[0]["error"]
    assert lr.procs["A"].exitcode == -signal.SIGKILL

    # B alive and answering, but its loader now raises every time: each attempt fails fast (B leaves
    # the group, so the learner's broadcast does not wait for its timeout) and says why; the third
    # failure of the version raises
    lr.hub.store.set("test/B/fail", "1")
    lr.transport.publish(weights(4), 4)
    outcomes, t0 = [], time.monotonic()
    with pytest.raises(WeightTransferError, match="version 4: 3 attempts failed"):
        while True:
            outcomes.append(lr.transport.after_announce(weights(4)))
            assert outcomes[-1]["retry"]
    assert time.monotonic() - t0 < CFG.collective_timeout_s
    assert len(outcomes) == 2
    assert all("broadcast failed" in o["events"][-1] and "reported: B: " in o["events"][-1]
               and "injected loader failure" in o["events"][-1] for o in outcomes)

    # no member left at all: nothing to wait for, no hang
    lr.kill("B")
    time.sleep(CFG.stale_after_s + 0.3)
    [out] = lr.publish(5)
    assert (out["members"], out["errors"], out["retry"], out["events"]) == (0, 0, False, [])


def test_a_member_dead_after_go_is_named_at_stale_after_s_not_the_collective_timeout():
    """A dies joining the group (after "go"): gloo's rendezvous would wait for it until
    collective_timeout_s on the learner and on B. The learner's set-up watches the heartbeats (A's
    loop and its engine rank are silent), names A, and aborts the send, which ends B's set-up too;
    the retry goes on with B."""
    cfg = CFG.model_copy(update={"collective_timeout_s": 300.0})
    lr = Rank0(cfg)
    try:
        lr.spawn("A")
        lr.spawn("B")
        lr.wait_live(["A", "B"])
        lr.hub.store.set("test/A/die_at_init", "1")
        time.sleep(0.5)                                  # A's loop reads it at its next poll
        t0 = time.monotonic()
        first, second = lr.publish(1)
        took = time.monotonic() - t0
        assert took < cfg.stale_after_s + 8.0, f"{took:.1f} s"
        assert first["events"][0] == "version 1: group 1 formed with A (rank 1), B (rank 2) (gloo, 5 buckets)"
        assert "version 1, group 1: broadcast stalled: missing A (rank 1, last heartbeat" in first["events"][1]
        assert "; worker 0 = rank 1 never beat)" in first["events"][1]
        assert second["events"] == ["version 1: group 2 formed with B (rank 1) (gloo, 5 buckets; A left)"]
        assert lr.received("B", 1) == checksums(1)
        error = lr.hub.get_json("test/B/error/1")
        assert error["consistent"] is True and "the learner aborted send 1" in error["error"]
        assert lr.procs["A"].exitcode == -signal.SIGKILL
        print(f"member dead after go: named and the version delivered to the survivor in {took:.1f} s")
    finally:
        lr.close()
