"""The coordinator's half of weight transport: announce, retries, catch-up, start-up sync, metrics.

After ``buffer.publish_version`` the coordinator calls :meth:`WeightSync.announce`: the
transport's ``after_announce`` on every learner rank at once (under ZeRO-3 the weights are
gathered bucket by bucket on all of them), again while rank 0 asks for another attempt (a
collective lost a member; the next attempt goes to the survivors). While a step waits for data,
:meth:`upkeep` sends the published version to live actors that lack it (Ray restarted them, or
they were too busy to join), so strict on-policy never waits for a version nobody can
generate with. Every event (a group formed, a member lost) is printed with ``[weights]``, every
failure also goes to the buffer's dead letters, and the step's metrics count them.
"""

from __future__ import annotations

import time
from collections import Counter

import ray

from actors.transport import WeightTransferError


class WeightSync:
    def __init__(self, ranks, buffer, transport, log=lambda line: print(line, flush=True)):
        self.ranks, self.buffer, self.transport, self.log = ranks, buffer, transport, log
        self.counts: Counter = Counter()
        self._last_upkeep = 0.0

    def announce(self, catch_up: bool = False) -> None:
        """``after_announce`` on every rank, repeated while rank 0's outcome asks for a retry."""
        while True:
            outcome = self.ranks.call("after_announce", catch_up)[0]
            if not outcome:
                return
            self._record(outcome, catch_up)
            if not outcome.get("retry"):
                return

    def _record(self, outcome: dict, catch_up: bool) -> None:
        self.counts["weights/transfer_errors"] += outcome.get("errors", 0)
        self.counts["weights/groups_formed"] += outcome.get("groups_formed", 0)
        if catch_up and outcome.get("members"):
            self.counts["weights/catch_ups"] += 1
        self.counts["weights/bytes_sent"] += outcome.get("bytes", 0)
        for event in outcome.get("events", []):
            self.log(f"[weights] {event}")
            if "formed" not in event:
                self.buffer.dead_letter("weights", "weight_transfer", detail=event[:2000])

    def _status(self) -> dict | None:
        return ray.get(self.ranks.actors[0].transport_status.remote())

    def upkeep(self, learner_version: int) -> None:
        """Rate-limited catch-up (``transport.upkeep_s``), only while the ranks hold the published version."""
        every = self.transport.upkeep_s
        now = time.monotonic()
        if every is None or now - self._last_upkeep < every:
            return
        self._last_upkeep = now
        if learner_version != self.buffer.get_version()[0]:
            return                    # replaying after a resume: these weights were never published
        status = self._status()
        if status and status["pending"]:
            self.announce(catch_up=True)

    def wait_for_actors(self, actor_ids: list[str], timeout_s: float) -> bool:
        """Until every actor in ``actor_ids`` is registered and live with the transport; False when the
        transport tracks no membership (nothing to wait for)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self._status()
            if status is None:
                return False
            missing = [a for a in actor_ids if a not in status["live"]]
            if not missing:
                return True
            if time.monotonic() > deadline:
                raise WeightTransferError(f"actors did not register with the weight transport within "
                                          f"{timeout_s:.0f} s", missing)
            time.sleep(0.5)

    def metrics(self) -> dict[str, float]:
        """The counts since the last call (one learner step's); none for a transport without membership."""
        if self.transport.upkeep_s is None:
            return {}
        out = {k: float(self.counts.get(k, 0)) for k in
               ("weights/transfer_errors", "weights/groups_formed", "weights/catch_ups", "weights/bytes_sent")}
        self.counts.clear()
        return out
