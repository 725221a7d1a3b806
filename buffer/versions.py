"""Policy versions and lag (DESIGN.md §3).

Version v = number of optimizer updates the learner has applied. Only the learner writes it,
together with where the weights of v can be fetched, in one atomic step that refuses to go
backwards (a stale learner process must not roll the actors back).

Admission: a prompt issued for learner step s may start only on weights of version
``>= start_version(s) - max_lag`` (:class:`StepClock`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import redis

from buffer.keys import RunKeys
from buffer.messages import Group
from buffer.queue import MAX_BLOCK_MS
from buffer.scripts import Scripts
from buffer.wake import StreamWatch

# Readers use only the history's newest entry (``wait`` blocks for the next XADD); the rest is for a
# person reading the stream. An off-policy run publishes every mini-batch (16 a step in the soak), so
# 100_000 entries grew a 30-minute soak's Redis by 0.6 MiB and would have kept growing to ~10 MiB.
VERSION_HISTORY_MAXLEN = 1_000


@dataclass(frozen=True)
class StepClock:
    """How policy versions map to learner steps from ``step`` on (the one home of the admission rule).

    Step s >= ``step`` starts at version ``version + (s - step) * updates_per_step``; a prompt
    issued for step s may start only on weights of at least that minus ``max_lag``. Strict
    on-policy (one update per step, max_lag 0): the prompt of step s needs exactly the version
    the learner has when it trains step s, so lag is 0. Fixed lag k >= 1 (``fixed_lag``, one update
    per step, max_lag k): the prompt of step s is pinned to exactly version s - k
    (:meth:`pin_version`), so its tokens are trained at update lag k. The learner publishes its
    clock (meta ``learner_clock``) at start, whenever its mode changes the updates per step or the
    lag bound (the lag guard), and after a step that applied fewer updates than planned (an update
    with no loss token is skipped: no optimizer step, no version); the feeder issues prompts by it.
    """

    step: int = 0
    version: int = 0
    updates_per_step: int = 1
    max_lag: int = 0
    fixed_lag: int | None = None     # k >= 1: pin each step's prompts to version start - k

    def __post_init__(self):
        if self.step < 0 or self.version < 0 or self.updates_per_step < 1 or self.max_lag < 0:
            raise ValueError(f"bad step clock {self}")
        if self.fixed_lag is not None and (self.fixed_lag < 1 or self.fixed_lag != self.max_lag
                                           or self.updates_per_step != 1):
            raise ValueError(f"bad step clock {self}: fixed_lag k >= 1 needs max_lag k and one update per step")

    def start_version(self, step: int) -> int:
        """The version the learner is at when it starts training ``step``."""
        if step < self.step:
            raise ValueError(f"step {step} is before this clock's first step {self.step}")
        return self.version + (step - self.step) * self.updates_per_step

    def min_version(self, step: int) -> int:
        """Version the actor's weights must have to start a prompt of ``step``."""
        return max(0, self.start_version(step) - self.max_lag)

    def pin_version(self, step: int) -> int | None:
        """The exact version a prompt of ``step`` must be sampled with (fixed lag), or None (any
        version >= :meth:`min_version`). The first k versions of a run cannot be k behind anything:
        a step starting at version v < k is pinned to version 0 and trains at lag v (the ramp-in,
        :func:`fixed_lag_required`)."""
        return None if self.fixed_lag is None else self.min_version(step)

    def newest_admissible_step(self, version: int) -> int:
        """The newest step whose prompts may start at ``version`` (the largest s with
        ``min_version(s) <= version``); the feeder issues every step up to it."""
        return self.step + max(version + self.max_lag - self.version, 0) // self.updates_per_step

    def step_at(self, version: int) -> int:
        """The learner step that trains next once ``version`` is published (a step ends on a publish)."""
        return self.step + max(version - self.version, 0) // self.updates_per_step

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def fixed_lag_required(version: int, k: int) -> int:
    """The update lag every token trained at ``version`` has under fixed lag k: k, except during the
    ramp-in (version < k: the data comes from version 0, the oldest there is, so the lag is version)."""
    return min(k, version)


def group_lags(group: Group, learner_version: int) -> np.ndarray:
    """(n,) int64: ``learner_version - version_start`` per response (the sampling policy's age)."""
    return learner_version - np.fromiter((r.version_start for r in group.responses), dtype=np.int64,
                                         count=len(group.responses))


def lag_histogram(groups: list[Group], learner_version: int) -> dict[int, int]:
    """lag -> number of responses, over ``groups``."""
    if not groups:
        return {}
    lags = np.concatenate([group_lags(g, learner_version) for g in groups])
    values, counts = np.unique(lags, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts)}


class VersionStore:
    """The run's ``version`` hash (version, location, time) and its history stream."""

    def __init__(self, client: redis.Redis, keys: RunKeys, scripts: Scripts):
        self.client, self.keys, self.scripts = client, keys, scripts

    def get(self) -> tuple[int, str]:
        version, location = self.client.hmget(self.keys.version, ["version", "location"])
        return int(version or 0), (location or b"").decode()

    def publish(self, version: int, location: str) -> None:
        """Atomically set (version, location); ValueError if ``version`` < current."""
        if version < 0:
            raise ValueError(f"version {version} < 0")
        try:
            self.scripts.publish_version(keys=[self.keys.version, self.keys.versions],
                                         args=[int(version), location, repr(time.time()),
                                               VERSION_HISTORY_MAXLEN])
        except redis.ResponseError as exc:
            if "LAGRL_VERSION_BACKWARDS" in str(exc):
                raise ValueError(f"refusing to publish version {version}: {exc}") from None
            raise

    def wait(self, at_least: int, timeout_s: float) -> int:
        """Block until version >= ``at_least`` or the timeout; returns the version seen last.

        Wakes on the history stream's XADD (no polling delay): read the version and the newest
        history id together, then block for entries after that id.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            pipe = self.client.pipeline(transaction=True)
            pipe.hget(self.keys.version, "version")
            pipe.xrevrange(self.keys.versions, count=1)
            raw, last = pipe.execute()
            version = int(raw or 0)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if version >= at_least or remaining_ms <= 0:
                return version
            last_id = last[0][0] if last else b"0-0"
            self.client.xread({self.keys.versions: last_id}, count=1,
                              block=max(1, min(remaining_ms, MAX_BLOCK_MS)))


class VersionWatch:
    """The newest published (version, location), kept current by a thread blocked on the version history
    stream (``buffer.wake.StreamWatch``): readers get it without a round trip (an actor checks it every
    engine step) and learn of a new version as soon as it is published, not at their next poll.

    The hash is re-read after the stream's tail is taken, so a publish in between wakes the thread. A
    Redis error (a restart outlasting the client's retries) is recorded, and the hash is read again once
    the stream answers; :meth:`latest` is never older than the last read.
    """

    def __init__(self, store: VersionStore, block_ms: int = 15_000, on_change: Callable[[], None] | None = None):
        """``on_change()`` runs in the thread after each read of the hash it made (an actor's wake-up: the
        new version is in :meth:`latest` by then)."""
        self.store, self.on_change = store, on_change
        self._latest = (0, "")
        self._watch = StreamWatch(store.client, [store.keys.versions], block_ms, on_grow=self._reread)

    @property
    def error(self) -> str:
        return self._watch.error

    def latest(self) -> tuple[int, str]:
        return self._latest

    def refresh(self) -> tuple[int, str]:
        """Read the hash now (one round trip), e.g. after a restart: the watch may have missed nothing,
        but this is the ground truth."""
        self._latest = self.store.get()
        return self._latest

    def stop(self) -> None:
        self._watch.stop()

    def _reread(self) -> None:
        self.refresh()
        if self.on_change is not None:
            self.on_change()
