"""The dead-letter stream: every rejected message with the reason, never a silent drop.

A rejected entry is dead-lettered and ACKed in one transaction (see ``queue.py``), so it is
neither lost nor delivered again. Only a prefix of the raw payload is copied (an oversize
payload must not be stored twice); its full length is always recorded.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from buffer.config import BufferConfig
from buffer.keys import RunKeys

_TEXT_FIELDS = ("source", "reason", "detail", "entry_id", "stream")


class DeadLetterLog:
    def __init__(self, client: redis.Redis, keys: RunKeys, cfg: BufferConfig):
        self.client, self.keys, self.cfg = client, keys, cfg

    def add(self, pipe: Any, source: str, reason: str, raw: bytes | None = None, detail: str = "",
            entry_id: str = "", stream: str = "", raw_len: int | None = None) -> None:
        """Queue the dead-letter XADD (and the counter) on ``pipe``: the caller's transaction.

        ``raw_len``: the payload's length when ``raw`` is already only its prefix.
        """
        raw = raw if isinstance(raw, (bytes, bytearray, memoryview)) else b""
        fields = {
            "source": source, "reason": reason, "detail": detail[:2000], "entry_id": entry_id,
            "stream": stream, "time": repr(time.time()), "raw_len": str(len(raw) if raw_len is None else raw_len),
            "raw": bytes(raw[: self.cfg.deadletter_raw_bytes]),
        }
        pipe.xadd(self.keys.deadletter, fields, maxlen=self.cfg.deadletter_maxlen, approximate=True)
        pipe.hincrby(self.keys.counters, "deadlettered", 1)

    def record(self, source: str, reason: str, raw: bytes | None = None, detail: str = "") -> None:
        """Dead-letter something that is not a stream entry (e.g. a prompt the feeder refused)."""
        pipe = self.client.pipeline(transaction=True)
        self.add(pipe, source, reason, raw, detail)
        pipe.execute()

    def recent(self, count: int = 100) -> list[dict]:
        """The ``count`` newest entries, oldest first; text fields decoded, ``raw`` left as bytes."""
        return [decode_entry(eid, fields)
                for eid, fields in reversed(self.client.xrevrange(self.keys.deadletter, count=count))]


def decode_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> dict:
    row: dict[str, Any] = {"id": entry_id.decode()}
    for name in _TEXT_FIELDS:
        row[name] = fields.get(name.encode(), b"").decode(errors="replace")
    row["time"] = float(fields.get(b"time", b"0") or 0)
    row["raw_len"] = int(fields.get(b"raw_len", b"0") or 0)
    row["raw"] = fields.get(b"raw", b"")
    return row
