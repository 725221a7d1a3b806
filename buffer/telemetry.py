"""Side channels of a run: learner metrics rows, actor heartbeats, the run's meta hash.

Small and write-light: one metrics row per learner step, one heartbeat per actor every few
seconds. The monitor reads them; nothing in training depends on them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgpack
import redis

from buffer.codec import decode_map, encode_map
from buffer.config import BufferConfig
from buffer.keys import PAYLOAD, RunKeys
from buffer.messages import InvalidMessage


class Telemetry:
    def __init__(self, client: redis.Redis, keys: RunKeys, cfg: BufferConfig):
        self.client, self.keys, self.cfg = client, keys, cfg

    def write_metrics(self, row: dict) -> str:
        """One learner-step row (``section/name/stat`` keys) as a schema-stamped msgpack map."""
        entry_id = self.client.xadd(self.keys.metrics, {PAYLOAD: encode_map(row)},
                                    maxlen=self.cfg.metrics_maxlen, approximate=True)
        return entry_id.decode()

    def heartbeat(self, actor_id: str, status: dict) -> None:
        """Overwrite the actor's field in the ``actors`` hash; ``time`` (unix s) is added if absent."""
        self.client.hset(self.keys.actors, actor_id, encode_map({"time": time.time(), **status}))

    def set_meta(self, **fields: Any) -> None:
        """Each value stored as JSON, so types round-trip and redis-cli shows it readably."""
        if fields:
            self.client.hset(self.keys.meta, mapping={k: json.dumps(v, default=str) for k, v in fields.items()})

    def announce_meta(self, **fields: Any) -> None:
        """:meth:`set_meta`, and an entry on the run's signals stream (capped) naming the fields, in one
        round trip: whoever blocks on that stream (the feeder) reads them at once, not at its next poll."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.keys.meta, mapping={k: json.dumps(v, default=str) for k, v in fields.items()})
        pipe.xadd(self.keys.signals, {b"fields": ",".join(fields)}, maxlen=100, approximate=True)
        pipe.execute()

    def get_meta(self, *fields: str) -> dict:
        """The whole meta hash, or only ``fields`` (absent ones are left out)."""
        if not fields:
            return decode_meta(self.client.hgetall(self.keys.meta))
        values = self.client.hmget(self.keys.meta, fields)
        return decode_meta({f.encode(): v for f, v in zip(fields, values) if v is not None})


def decode_meta(raw: dict[bytes, bytes]) -> dict:
    out = {}
    for k, v in raw.items():
        try:
            out[k.decode()] = json.loads(v)
        except ValueError:
            out[k.decode()] = v.decode(errors="replace")
    return out


def decode_heartbeats(raw: dict[bytes, bytes], now: float | None = None) -> dict[str, dict]:
    """actor_id -> status, plus ``age_s`` (seconds since its last beat)."""
    now = time.time() if now is None else now
    out = {}
    for actor_id, payload in sorted(raw.items()):
        try:
            status = decode_map(payload)
        except (InvalidMessage, msgpack.ExtraData):
            status = {"error": "undecodable heartbeat"}
        status.pop("schema", None)
        status["age_s"] = now - float(status.get("time", 0.0))
        out[actor_id.decode()] = status
    return out


def decode_metrics_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> dict:
    """A metrics row with its stream ``id``; an undecodable one becomes ``{"id", "error"}``."""
    try:
        row = decode_map(fields.get(PAYLOAD, b""))
    except InvalidMessage as exc:
        return {"id": entry_id.decode(), "error": str(exc)}
    row.pop("schema", None)
    return {"id": entry_id.decode(), **row}
