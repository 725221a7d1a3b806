"""The collective protocol end to end on gloo, without a vLLM engine: this process is learner rank 0,
spawned processes are the members (``tests.collective_members``: lagrl's real weight-transfer engine
receive path into a recording model). Faults: a member SIGKILLed while idle, one SIGKILLed
mid-broadcast, a restarted member caught up, a member whose loader always fails (the version
raises after max_attempts), no member at all. Each failure must end within its deadline with an
error naming the member, and the survivors must hold exactly the weights sent.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest
import torch

pytestmark = pytest.mark.integration

from actors.config import CollectiveConfig
from actors.transport import TensorListSource, WeightTransferError, make_transport
from tests.collective_members import member_main

CFG = CollectiveConfig(backend="gloo", bucket_mb=1, join_timeout_s=20.0, collective_timeout_s=10.0,
                       heartbeat_s=0.2, stale_after_s=1.5, max_attempts=3)


def weights(version: int) -> list[tuple[str, torch.Tensor]]:
    """~2.3 MB in 6 tensors (3 buckets of <= 1 MB), different for every version."""
    g = torch.Generator().manual_seed(version)
    shapes = {"embed": (256, 512), "q": (128, 128), "k": (128, 128), "norm": (512,), "mlp": (512, 512),
              "head_bias": (300,)}
    return [(n, torch.randn(s, generator=g)) for n, s in shapes.items()]


def checksums(version: int) -> dict[str, float]:
    return {n: float(t.double().sum()) for n, t in sorted(weights(version))}


class Learner:
    """Rank 0 of a 1-rank learner: publish + after_announce, like ``learner.weight_sync``."""

    def __init__(self):
        self.transport = make_transport("collective", "proto", cfg=CFG)
        self.actor_transport = self.transport.bind_learner(0, "127.0.0.1", "cpu")
        self.hub = self.transport._sender.hub
        self.ctx = mp.get_context("spawn")
        self.procs: dict[str, mp.Process] = {}

    def spawn(self, actor: str, die_at=None, fail: bool = False) -> None:
        p = self.ctx.Process(target=member_main, args=(self.actor_transport, actor, die_at, fail), daemon=True)
        p.start()
        self.procs[actor] = p

    def wait_live(self, actors: list[str], timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while set(actors) - set(self.transport.learner_status()["live"]):
            assert time.monotonic() < deadline, f"{actors} never registered: {self.transport.learner_status()}"
            time.sleep(0.1)

    def publish(self, version: int, catch_up: bool = False) -> list[dict]:
        """All attempts of one version (or one catch-up); returns their outcomes."""
        if not catch_up:
            assert self.transport.publish(weights(version), version).endswith(f"/{version}")
        outcomes = [self.transport.after_announce(weights(version), catch_up=catch_up)]
        while outcomes[-1]["retry"]:
            outcomes.append(self.transport.after_announce(weights(version)))
        return outcomes

    def received(self, actor: str, version: int, timeout_s: float = 10.0) -> dict:
        key = f"test/{actor}/v{version}"
        assert self.hub.wait_keys([key], timeout_s) == [], f"{actor} never reported version {version}"
        return self.hub.get_json(key)

    def kill(self, actor: str) -> None:
        os.kill(self.procs[actor].pid, signal.SIGKILL)
        self.procs[actor].join(10)

    def close(self) -> None:
        self.hub.store.set("test/stop", "1")
        for p in self.procs.values():
            p.join(10)
            if p.is_alive():
                p.kill()


@pytest.fixture
def learner():
    lr = Learner()
    yield lr
    lr.close()


def test_versions_faults_catch_up_and_max_attempts(learner):
    lr = learner
    lr.spawn("A", die_at=(3, 0))            # A dies loading bucket 0 of version 3 (of 3 buckets)
    lr.spawn("B")
    lr.wait_live(["A", "B"])

    # v1: one group of learner + A + B, three buckets, exact weights at both
    [out] = lr.publish(1)
    assert out["errors"] == 0 and out["groups_formed"] == 1 and out["members"] == 2
    assert out["events"] == ["version 1: group 1 formed with A (rank 1), B (rank 2) (gloo, 3 buckets)"]
    assert lr.received("A", 1) == lr.received("B", 1) == checksums(1)

    # B dies while idle: v2's first attempt ends once B's heartbeat is stale (not after join_timeout),
    # naming it; the retry re-forms the group with A alone
    lr.kill("B")
    t0 = time.monotonic()
    first, second = lr.publish(2)
    assert time.monotonic() - t0 < 10.0
    assert first["retry"] and first["errors"] == 1
    assert "version 2, group 1: not ready within 20 s: missing B (rank 2, last heartbeat" in first["events"][0]
    assert second["events"] == ["version 2: group 2 formed with A (rank 1) (gloo, 3 buckets; B left)"]
    assert not second["retry"] and lr.received("A", 2) == checksums(2)

    # B comes back (a new incarnation): the learner sees it lacks v2 and catches it up alone
    lr.spawn("B")
    lr.wait_live(["B"])
    assert lr.transport.learner_status()["pending"]
    [catch] = lr.publish(2, catch_up=True)
    assert catch["events"] == ["version 2: group 3 formed with B (rank 1) (gloo, 3 buckets; B restarted) [catch-up]"]
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
        "version 3: group 4 formed with A (rank 1), B (rank 2) (gloo, 3 buckets; A rejoined)"
    assert "version 3, group 4: broadcast failed: missing A (rank 1, last heartbeat" in outcomes[0]["events"][1]
    assert outcomes[1]["events"] == ["version 3: group 5 formed with B (rank 1) (gloo, 3 buckets; A left)"]
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
    assert lr.publish(5) == [{"retry": False, "events": [], "errors": 0, "groups_formed": 0, "members": 0,
                              "bytes": 0, "seconds": pytest.approx(0.0, abs=1.0)}]

