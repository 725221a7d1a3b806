"""The collective transport's control plane: one TCPStore that learner rank 0 serves for the run.

Everything that is not tensor data goes through it: actors register and heartbeat here, the
learner announces each send (who is in the group, which version, which bucket plan) and waits
for the members' answers. Every wait has a deadline and reports *who* did not answer, so an
error can name the missing actor instead of a store key. No vLLM import: the hub is unit
tested with a real TCPStore and nothing else.

Keys (values are JSON):
  reg/count, reg/<n>            registration log: {"actor", "inc" (incarnation), "workers", "pid"}
  beat/<actor>                  {"inc", "t"}: the actor's loop reached a poll at unix time t
  beat/<actor>/w<k>             {"inc", "t"}: the actor's engine rank k was waiting in a transfer
                                (group set-up, header, bucket) at t; while a send runs the actor's
                                loop is blocked in the engine, and each worker answers for itself
  send                          the current send: {"seq", "version", "gen", "world", "backend",
                                "plan", "timeout_s", "members": [[actor, inc, rank_offset, workers]]}
  plan/<id>                     a bucket plan, stored once per content hash
  s<seq>/ready/<actor>          the member is between engine steps and waits for the decision
  s<seq>/decision               "go" (every member is ready) | "abort" (see the learner's events)
  s<seq>/done/<actor>           the member loaded the version
  s<seq>/failed/<actor>         the member's receive failed (the error text)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch.distributed as dist


@dataclass(frozen=True)
class Registration:
    actor: str
    inc: str          # incarnation: a new one per process, so a restarted actor is a new member
    workers: int      # engine workers (tensor-parallel ranks) this actor brings to the group
    pid: int = 0


class Hub:
    """A TCPStore plus the key layout above (module docstring)."""

    def __init__(self, store: dist.TCPStore, host: str, port: int):
        self.store, self.host, self.port = store, host, port

    @classmethod
    def serve(cls, host: str, timeout_s: float) -> Hub:
        """Learner rank 0: serve a new hub on a free port of ``host`` (bound by the server itself)."""
        store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                              timeout=dt.timedelta(seconds=timeout_s))
        hub = cls(store, host, store.port)
        hub.set_json("send", {"seq": 0})
        store.set("reg/count", "0")
        return hub

    @classmethod
    def connect(cls, host: str, port: int, timeout_s: float) -> Hub:
        store = dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                              timeout=dt.timedelta(seconds=timeout_s))
        return cls(store, host, port)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- values
    def set_json(self, key: str, value) -> None:
        self.store.set(key, json.dumps(value))

    def get_json(self, key: str, default=None):
        """The value at ``key``, or ``default`` when it does not exist (never blocks)."""
        if not self.has(key):
            return default
        return json.loads(self.store.get(key).decode())

    def has(self, key: str) -> bool:
        return self.store.check([key])

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self.store.delete_key(key)

    # ---- membership
    def register(self, actor: str, inc: str, workers: int) -> None:
        n = self.store.add("reg/count", 1)
        self.set_json(f"reg/{n}", {"actor": actor, "inc": inc, "workers": workers, "pid": os.getpid()})
        self.beat(actor, inc)

    def registrations(self) -> list[Registration]:
        """The latest incarnation of every actor that ever registered, in order of registration."""
        latest: dict[str, Registration] = {}
        for n in range(1, self.store.add("reg/count", 0) + 1):
            r = self.get_json(f"reg/{n}")
            if r is None:                           # counted, not written yet
                continue
            latest.pop(r["actor"], None)          # a re-registration moves the actor to the end
            latest[r["actor"]] = Registration(r["actor"], r["inc"], int(r["workers"]), int(r.get("pid", 0)))
        return list(latest.values())

    def beat(self, actor: str, inc: str, worker: int | None = None) -> None:
        """The actor's loop (``worker`` None) or its engine rank ``worker`` is alive now."""
        self.set_json(f"beat/{actor}" if worker is None else f"beat/{actor}/w{worker}", {"inc": inc, "t": time.time()})

    def beat_age(self, actor: str, worker: int | None = None, inc: str | None = None) -> float | None:
        """Seconds since ``actor`` last reached a poll, or since its engine rank ``worker`` last beat
        (None: never; also when ``inc`` is given and the beat is another incarnation's)."""
        b = self.get_json(f"beat/{actor}" if worker is None else f"beat/{actor}/w{worker}")
        if b is None or inc is not None and b["inc"] != inc:
            return None
        return max(time.time() - float(b["t"]), 0.0)

    def stale_workers(self, actor: str, inc: str, workers: int, stale_after_s: float) -> list[int]:
        """The engine ranks of ``actor``'s incarnation ``inc`` that did not beat within ``stale_after_s``."""
        ages = [self.beat_age(actor, k, inc) for k in range(workers)]
        return [k for k, age in enumerate(ages) if age is None or age > stale_after_s]

    def live(self, stale_after_s: float) -> list[Registration]:
        """Registered actors whose latest incarnation heartbeat within ``stale_after_s``."""
        out = []
        for r in self.registrations():
            b = self.get_json(f"beat/{r.actor}")
            if b is not None and b["inc"] == r.inc and time.time() - float(b["t"]) <= stale_after_s:
                out.append(r)
        return out

    def describe(self, actor: str, rank: int | None = None, workers: list[int] | None = None,
                 inc: str | None = None) -> str:
        """``'lagrl-gen-x-0 (rank 1, last heartbeat 2.6 s ago)'``: how a missing member is named;
        ``workers``: its engine ranks that went silent, each with its group rank and last beat."""
        age = self.beat_age(actor)
        beat = "never heartbeat" if age is None else f"last heartbeat {age:.1f} s ago"
        for k in workers or []:
            wage = self.beat_age(actor, k, inc)
            where = f"worker {k}" + ("" if rank is None else f" = rank {rank + k}")
            beat += f"; {where} " + ("never beat" if wage is None else f"last beat {wage:.1f} s ago")
        return f"{actor} ({'' if rank is None else f'rank {rank}, '}{beat})"

    # ---- waits
    def wait_keys(self, keys: list[str], timeout_s: float, give_up: Callable[[list[str]], bool] | None = None,
                  tick: Callable[[], None] | None = None, tick_s: float = 0.25) -> list[str]:
        """Wait until every key exists; return those still missing at the deadline ([] = all there).

        ``give_up(missing)`` may end the wait early (e.g. every missing member's heartbeat is
        stale); ``tick()`` runs every ``tick_s`` (e.g. an actor keeping its prompts alive).
        """
        missing = list(keys)

        def arrived() -> bool:
            missing[:] = [k for k in missing if not self.has(k)]
            return not missing

        self.wait_for(arrived, timeout_s, give_up=None if give_up is None else lambda: give_up(missing),
                      tick=tick, tick_s=tick_s)
        return missing

    @staticmethod
    def wait_for(done: Callable[[], bool], timeout_s: float, give_up: Callable[[], bool] | None = None,
                 tick: Callable[[], None] | None = None, tick_s: float = 0.25) -> bool:
        """Poll ``done()`` until it is True (returns True) or the deadline / ``give_up()`` (False).

        The pause starts at 0.2 ms and doubles to 5 ms: an answer that comes at once (a member
        waiting for the send, the learner waiting for its ready) is seen within a fraction of a
        millisecond, a long wait costs one store round trip per 5 ms. TCPStore's own timed wait
        logs a warning per timeout, so it is not used.
        """
        deadline = time.monotonic() + timeout_s
        next_tick = time.monotonic() + tick_s
        pause = 0.0002
        while True:
            if done():
                return True
            now = time.monotonic()
            if now >= deadline:
                return False
            if now >= next_tick:
                next_tick = now + tick_s
                if give_up is not None and give_up():
                    return False
                if tick is not None:
                    tick()
            time.sleep(min(pause, max(deadline - now, 0.0)))
            pause = min(pause * 2, 0.005)
