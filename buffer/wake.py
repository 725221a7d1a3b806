"""Waiting for work without polling: block until one of several streams gets a new entry.

A consumer with nothing to do (an idle actor: no request in its engine, prompts held for a
version not yet published) takes the streams' tails, tries its non-blocking reads, and only then
blocks on ``XREAD`` from those tails: an entry appended after the tails were taken wakes it at
once, so nothing is missed between the read and the wait. Entries of other consumers wake it too
(harmless: it reads again and finds nothing).
"""

from __future__ import annotations

import threading
from typing import Callable

import redis

from buffer.queue import MAX_BLOCK_MS


def stream_tails(client: redis.Redis, keys: list[str]) -> dict[str, bytes]:
    """The newest entry id of each stream (``0-0`` for an empty or missing one), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xrevrange(key, count=1)
    return {key: (newest[0][0] if newest else b"0-0") for key, newest in zip(keys, pipe.execute())}


def wait_for_entries(client: redis.Redis, tails: dict[str, bytes], timeout_ms: int) -> bool:
    """Block until a stream of ``tails`` has an entry after its tail, or ``timeout_ms`` passed;
    True when one has."""
    if timeout_ms <= 0 or not tails:
        return False
    return bool(client.xread(tails, count=1, block=min(timeout_ms, MAX_BLOCK_MS)))


class StreamWatch:
    """Which of several streams got an entry since the caller last asked, without a read of the caller's:
    a daemon thread blocks on ``XREAD`` from the streams' tails and marks each stream that grows.

    An actor takes prompts between engine steps; reading both prompt streams on every step was two round
    trips a step (8% of a CPU actor's loop, more beside a GPU's short steps) that nearly always found
    nothing. It reads a stream when this says it grew. Every stream starts marked, and a Redis error in
    the thread marks them all (its reads resume after a pause): a caller reads too often then, never
    too late. A caller that also reads on a timer (reclaims of dead actors' prompts) covers the rest.

    ``on_grow()`` runs after the tails are taken (here, and again after an error) and after each growth,
    in the thread from then on: a reader of what the streams announce (``buffer.versions.VersionWatch``)
    re-reads it there, and an append between the tails and that read wakes the thread once more.
    """

    def __init__(self, client: redis.Redis, keys: list[str], block_ms: int = 15_000,
                 on_grow: Callable[[], None] | None = None):
        self.client, self.keys, self.block_ms = client, list(keys), min(block_ms, MAX_BLOCK_MS)
        self.on_grow = on_grow
        self._grown: set[str] = set()
        self._lock = threading.Lock()
        self.error = ""
        self._tails = stream_tails(client, self.keys)
        self._grew(self.keys)                # everything before these tails: the caller reads it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-watch", daemon=True)
        self._thread.start()

    def grew(self, key: str) -> bool:
        """``key`` got an entry since the last call that answered True for it (True at first); asking
        clears the mark, so read the stream after asking: an entry appended meanwhile marks it again."""
        with self._lock:
            if key in self._grown:
                self._grown.discard(key)
                return True
            return False

    def stop(self) -> None:
        self._stop.set()

    def _mark(self, keys) -> None:
        with self._lock:
            self._grown.update(keys)

    def _grew(self, keys) -> None:
        self._mark(keys)
        if self.on_grow is not None:
            self.on_grow()

    def _run(self) -> None:
        tails = self._tails
        while not self._stop.is_set():
            try:
                if tails is None:
                    tails = stream_tails(self.client, self.keys)
                    self._grew(self.keys)
                grown = []
                for key, entries in self.client.xread(tails, count=100, block=self.block_ms) or []:
                    key = key.decode() if isinstance(key, bytes) else key
                    tails[key] = entries[-1][0]
                    grown.append(key)
                if grown:
                    self._grew(grown)
            except Exception as exc:  # noqa: BLE001 (a dead thread would hide new prompts)
                self.error = f"{type(exc).__name__}: {exc}"[:300]
                tails = None
                self._mark(self.keys)
                self._stop.wait(0.5)
