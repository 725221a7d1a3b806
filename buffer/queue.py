"""One stream read through one consumer group: deliver, validate, reject, reclaim, ACK, trim.

Shared by the prompts stream (group "actors") and the groups stream (group "learner"). The
rules that make the buffer lossless live here:

* an entry is delivered to one consumer and stays pending until ACKed;
* an entry idle longer than ``reclaim_idle_ms`` in a dead consumer's pending list is reclaimed
  by another consumer (XAUTOCLAIM), after more than ``max_deliveries`` deliveries it is poison
  and dead-lettered instead;
* an entry that fails validation is dead-lettered and ACKed in one transaction;
* trimming removes only ACKed entries: ``XTRIM MINID`` never passes the oldest pending or
  undelivered entry, and keeps the newest ``retention`` ACKed ones.
"""

from __future__ import annotations

from typing import Callable, Generic, NamedTuple, TypeVar

import redis
from redis.client import Pipeline

from buffer.config import BufferConfig
from buffer.deadletter import DeadLetterLog
from buffer.keys import FRESH, PAYLOAD, RunKeys, StreamSpec
from buffer.messages import InvalidMessage
from buffer.scripts import ACK, Scripts, queue_eval

T = TypeVar("T")


class Entry(NamedTuple):
    id: str
    payload: bytes | None      # None: the entry was deleted or has no payload field
    fresh: bool = False        # first delivery of an entry put_group marked FRESH


MAX_BLOCK_MS = 20_000                   # below connect()'s 30 s socket timeout


class StreamQueue(Generic[T]):
    def __init__(self, client: redis.Redis, spec: StreamSpec, keys: RunKeys, cfg: BufferConfig,
                 scripts: Scripts, deadletters: DeadLetterLog, decode: Callable[[bytes], T], *,
                 gauge: str = "", rejected_counter: str):
        self.client, self.spec, self.keys, self.cfg = client, spec, keys, cfg
        self.scripts, self.deadletters, self.decode = scripts, deadletters, decode
        self.gauge = gauge                        # counter decremented per ACK ('' = none)
        self.rejected_counter = rejected_counter  # counter bumped per dead-lettered entry
        self._cursor = "0-0"                      # XAUTOCLAIM scan position (amortises the scan)
        self.ensure_group()

    # ---- reading
    def ensure_group(self) -> None:
        try:   # from id 0: entries written before the group existed are still delivered
            self.client.xgroup_create(self.spec.key, self.spec.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read_new(self, consumer: str, count: int, block_ms: int) -> list[Entry]:
        """Never-delivered entries; ``block_ms <= 0`` does not block (Redis' BLOCK 0 would wait forever)."""
        block = min(block_ms, MAX_BLOCK_MS) if block_ms > 0 else None
        return self._readgroup(consumer, ">", count, block)

    def read_own_pending(self, consumer: str, count: int = 1000) -> list[Entry]:
        """This consumer's delivered-but-un-ACKed entries (a restarted consumer resumes here)."""
        out: list[Entry] = []
        start = "0"
        while True:
            batch = self._readgroup(consumer, start, count, None)
            out += batch
            if len(batch) < count:
                return out
            start = batch[-1][0]

    def reclaim(self, consumer: str, min_idle_ms: int, count: int, full_scan: bool) -> list[Entry]:
        """Take over entries idle >= ``min_idle_ms`` in other consumers' pending lists.

        ``full_scan=False`` does one XAUTOCLAIM step from the saved cursor (cheap enough for every
        take); ``True`` walks the whole pending list (a learner taking over a dead one).
        """
        claimed: list[Entry] = []
        start = "0-0" if full_scan else self._cursor
        while len(claimed) < count:
            reply = self.client.xautoclaim(self.spec.key, self.spec.group, consumer, min_idle_ms,
                                           start_id=start, count=count - len(claimed))
            start = _text(reply[0])
            deleted = [_text(e) for e in (reply[2] if len(reply) > 2 else [])]   # Redis >= 7
            claimed += [Entry(_text(eid), _payload(fields)) for eid, fields in reply[1] if eid is not None]
            if any(eid is None for eid, _ in reply[1]):   # Redis 6.2: a pending entry was XDELed
                deleted += self._deleted_pending(consumer)
            if deleted:   # never silent: its payload is gone, but the loss is recorded
                self.reject([(eid, None, InvalidMessage("deleted_entry", "pending entry deleted from the stream"))
                             for eid in dict.fromkeys(deleted)])
            if start == "0-0" or not full_scan:
                break
        self._cursor = start
        return self._drop_poison(claimed)

    def _deleted_pending(self, consumer: str) -> list[str]:
        """Ids pending for ``consumer`` whose stream entry no longer exists."""
        pending = self.client.xpending_range(self.spec.key, self.spec.group, "-", "+", 1000, consumername=consumer)
        ids = [_text(p["message_id"]) for p in pending]
        pipe = self.client.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(self.spec.key, entry_id, entry_id, count=1)
        return [eid for eid, found in zip(ids, pipe.execute()) if not found]

    def _readgroup(self, consumer: str, start: str, count: int, block: int | None) -> list[Entry]:
        try:
            reply = self.client.xreadgroup(self.spec.group, consumer, {self.spec.key: start},
                                           count=count, block=block)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_group()   # stream deleted by hand: recreate, the next call reads
            return []
        if not reply:
            return []
        entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
        first = start == ">"     # a re-read of one's own pending entries is not a first delivery
        return [Entry(_text(eid), _payload(fields), first and FRESH in (fields or ()))
                for eid, fields in entries]

    def _drop_poison(self, claimed: list[Entry]) -> list[Entry]:
        """Dead-letter reclaimed entries delivered more than ``max_deliveries`` times."""
        if not claimed:
            return claimed
        pipe = self.client.pipeline(transaction=False)
        for entry in claimed:
            pipe.xpending_range(self.spec.key, self.spec.group, entry.id, entry.id, 1)
        deliveries = {}
        for info in pipe.execute():
            if info:
                deliveries[_text(info[0]["message_id"])] = int(info[0]["times_delivered"])
        keep, poison = [], []
        for entry in claimed:
            n = deliveries.get(entry.id, 0)
            if n > self.cfg.max_deliveries:
                poison.append((entry.id, entry.payload,
                               InvalidMessage("too_many_deliveries", f"delivered {n} times")))
            else:
                keep.append(entry)
        if poison:
            self.reject(poison)
        return keep

    # ---- validation
    def decode_or_reject(self, entries: list[Entry]) -> list[tuple[str, T]]:
        """Decode each payload; dead-letter + ACK the ones that fail (never raise, never drop)."""
        good, bad = [], []
        for entry_id, raw, _ in entries:
            try:
                if raw is None:
                    raise InvalidMessage("missing_payload", "entry deleted or has no 'data' field")
                good.append((entry_id, self.decode(raw)))
            except InvalidMessage as exc:
                bad.append((entry_id, raw, exc))
            except Exception as exc:  # a decoder bug must not stop the consumer either
                bad.append((entry_id, raw, InvalidMessage("decode_error", repr(exc)[:300])))
        if bad:
            self.reject(bad)
        return good

    def reject(self, bad: list[tuple[str, bytes | None, InvalidMessage]]) -> None:
        pipe = self.client.pipeline(transaction=True)
        for entry_id, raw, exc in bad:
            self.deadletters.add(pipe, self.spec.key.rsplit(":", 1)[-1], exc.reason, raw, exc.detail,
                                 entry_id=entry_id, stream=self.spec.key)
        self.ack(pipe, [(eid, "", self.rejected_counter) for eid, _, _ in bad])
        pipe.execute()

    # ---- ACK and trim
    def ack(self, client_or_pipe, triples: list[tuple[str, str, str]]):
        """ACK ``(entry id, group id to mark consumed or '', counter to bump or '')`` atomically."""
        args: list[str] = [self.spec.group, self.gauge]
        for triple in triples:
            args.extend(triple)
        keys = [self.spec.key, self.spec.acked, self.keys.counters, self.keys.consumed, self.keys.fresh]
        if isinstance(client_or_pipe, Pipeline):
            return queue_eval(client_or_pipe, ACK, keys, args)
        return self.scripts.ack(keys=keys, args=args)

    def trim(self, retention: int) -> int:
        """Drop ACKed entries older than the newest ``retention`` ones; never an unconsumed entry."""
        return int(self.scripts.trim(keys=[self.spec.key, self.spec.acked], args=[self.spec.group, retention]))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _payload(fields: dict | None) -> bytes | None:
    if not fields:
        return None
    return fields.get(PAYLOAD)
