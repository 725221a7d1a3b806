"""Waiting for work without polling: block until one of several streams gets a new entry.

A consumer with nothing to do (an idle actor: no request in its engine, prompts held for a
version not yet published) takes the streams' tails, tries its non-blocking reads, and only then
blocks on ``XREAD`` from those tails: an entry appended after the tails were taken wakes it at
once, so nothing is missed between the read and the wait. Entries of other consumers wake it too
(harmless: it reads again and finds nothing).
"""

from __future__ import annotations

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
