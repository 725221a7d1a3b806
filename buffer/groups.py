"""The groups stream: actors -> learner (consumer group "learner"), with backpressure.

Exactly-once in effect: a group can reach the stream twice (a slow actor whose prompt was
reclaimed; a retried write) and an entry can be delivered twice (reclaim after a learner death).
The learner trains on a group only if its ``group_id`` is not in the ``consumed`` set, and
:meth:`GroupChannel.ack` adds the id to that set in the same atomic step as the XACK. A
duplicate is ACKed and counted, never trained on. The check costs a round trip per take, so
put_group makes it at write time where it can: an entry whose group id was neither consumed nor
in the stream is marked FRESH, and its first delivery skips the read-time check.

ACK when the training on a group is durable (e.g. at checkpoint time): what was taken but not
ACKed when the learner dies is re-delivered by :meth:`pending` (same consumer name) or
:meth:`reclaim` (another one).
"""

from __future__ import annotations

import threading
import time

import redis

from buffer.codec import decode_group, group_frame_parts
from buffer.config import BufferConfig
from buffer.deadletter import DeadLetterLog
from buffer.keys import PROMPT_READERS, RunKeys
from buffer.messages import Group
from buffer.prompts import PromptChannel
from buffer.queue import Entry, StreamQueue
from buffer.scripts import Scripts
from buffer.wire import Parts

# What a consumer did with a group it ACKs (each has a counter ``groups_<outcome>``):
# trained into the weights, filtered (zero advantage under dynamic sampling), stale (lag beyond
# the mode's bound, also dead-lettered), already_trained (in the restored weights: ACK only),
# evaluated (held-out evaluation groups).
GROUP_OUTCOMES = ("trained", "filtered", "stale", "already_trained", "evaluated")


class BackpressureTimeout(TimeoutError):
    """The learner has not consumed enough groups to make room within the timeout."""


class GroupChannel:
    def __init__(self, client: redis.Redis, keys: RunKeys, cfg: BufferConfig, scripts: Scripts,
                 deadletters: DeadLetterLog, prompts: PromptChannel):
        self.client, self.keys, self.cfg, self.scripts = client, keys, cfg, scripts
        self.deadletters, self.prompts = deadletters, prompts
        self.queue: StreamQueue[Group] = StreamQueue(
            client, keys.group_stream, keys, cfg, scripts, deadletters,
            decode=lambda raw: decode_group(raw, cfg.max_message_bytes),
            gauge="groups_unconsumed", rejected_counter="groups_deadlettered")
        self._put_keys = [keys.groups, keys.counters, keys.prompts, keys.prompt_stream.acked, keys.consumed,
                          keys.fresh]             # the put script's KEYS (buffer/scripts.py)
        self._in_flight: dict[str, str] = {}   # group_id -> entry id handed out here, not yet ACKed
        self._lock = threading.Lock()

    # ---- producer side
    def put(self, group: Group, prompt_entry_id: str | None = None) -> str:
        """Store a group and ACK its prompt atomically; waits for room. '' if not stored.

        Not stored: the prompt was already answered (duplicate, dropped) or the payload exceeds
        ``max_message_bytes`` (dead-lettered, and the prompt ACKed so it is not generated again).
        """
        payload = self._framed(group, prompt_entry_id)
        if payload is None:
            return ""
        return self._stored(self.scripts.put_group(keys=self._put_keys, args=self._put_args(
            group, payload, prompt_entry_id)), group, prompt_entry_id, payload)

    def put_many(self, items: list[tuple[Group, str | None]]) -> list[str]:
        """:meth:`put` for several groups, their scripts sent in one round trip (each still atomic on
        its own); one entry id (or '') per item, in order. A group that finds no room waits for it
        alone, after the others are stored. An actor flushes the groups whose scoring finished
        together this way: at 1K-token groups the round trip was a third of a put's time."""
        if len(items) == 1:                 # no pipeline for one: it measured slower than the plain call
            return [self.put(*items[0])]
        out = [""] * len(items)
        # EVALSHA by hand: a pipeline holding Script objects first asks SCRIPT EXISTS, one more round trip
        pipe = self.client.pipeline(transaction=False)
        keys, sent = self._put_keys, []     # sent: (index, payload) of each script in the pipeline
        for i, (group, entry_id) in enumerate(items):
            payload = self._framed(group, entry_id)
            if payload is None:
                continue
            pipe.evalsha(self.scripts.put_group.sha, len(keys), *keys, *self._put_args(group, payload, entry_id))
            sent.append((i, payload))
        replies = pipe.execute(raise_on_error=False) if sent else []
        for (i, payload), reply in zip(sent, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):    # a restarted server: the call loads it
                reply = self.scripts.put_group(keys=keys, args=self._put_args(items[i][0], payload, items[i][1]))
            elif isinstance(reply, Exception):
                raise reply
            out[i] = self._stored(reply, *items[i], payload)
        return out

    def _stored(self, reply, group: Group, prompt_entry_id: str | None, payload: Parts) -> str:
        """The entry id from a put script's reply, after waiting for room if it found none; '' for a
        duplicate answer."""
        status, entry_id = reply
        if status == 0:
            return self._put_waiting(group, prompt_entry_id, payload)
        return entry_id.decode() if status == 1 else ""

    def _put_args(self, group: Group, payload: Parts, prompt_entry_id: str | None) -> list:
        return [payload, self.cfg.max_unconsumed_groups, prompt_entry_id or "", PROMPT_READERS, group.group_id]

    def _framed(self, group: Group, prompt_entry_id: str | None) -> Parts | None:
        """The group's frame (its arrays go to the socket uncopied), or None when it is oversize: then
        it is dead-lettered and its prompt ACKed, so it is not generated again."""
        payload = Parts(group_frame_parts(group))
        if len(payload) <= self.cfg.max_message_bytes:
            return payload
        pipe = self.client.pipeline(transaction=True)
        self.deadletters.add(pipe, "put_group", "oversize", payload.prefix(self.cfg.deadletter_raw_bytes),
                             f"group {group.group_id}: {len(payload)} bytes > {self.cfg.max_message_bytes}",
                             raw_len=len(payload))   # never joined whole: it is oversize
        if prompt_entry_id:
            self.prompts.ack_rejected(pipe, prompt_entry_id)
        pipe.execute()
        return None

    def _put_waiting(self, group: Group, prompt_entry_id: str | None, payload: Parts) -> str:
        """The put script retried with backoff until there is room (backpressure)."""
        args = self._put_args(group, payload, prompt_entry_id)
        start = last_touch = time.monotonic()
        delay = 0.005
        while True:
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            status, entry_id = self.scripts.put_group(keys=self._put_keys, args=args)   # atomic: room, ACK, XADD
            if status == 1:
                return entry_id.decode()
            if status == 2:
                return ""
            now = time.monotonic()
            if now - start > self.cfg.backpressure_timeout_s:
                raise BackpressureTimeout(
                    f"{self.keys.groups}: {self.cfg.max_unconsumed_groups} groups written and not yet "
                    f"consumed (max_unconsumed_groups) for {self.cfg.backpressure_timeout_s:.0f} s "
                    f"(backpressure_timeout_s): is the learner running?")
            if prompt_entry_id and now - last_touch > self.cfg.reclaim_idle_ms / 3000:
                # waiting is not dying: keep the prompt from being reclaimed by another actor
                self.prompts.touch(group.actor_id, [prompt_entry_id])
                last_touch = now

    # ---- learner side
    def take(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, Group]]:
        return self._accept(self.queue.read_new(consumer, count, block_ms))

    def pending(self, consumer: str) -> list[tuple[str, Group]]:
        return self._accept(self.queue.read_own_pending(consumer))

    def reclaim(self, consumer: str, min_idle_ms: int | None = None,
                count: int | None = None) -> list[tuple[str, Group]]:
        idle = self.cfg.reclaim_idle_ms if min_idle_ms is None else min_idle_ms
        entries = self.queue.reclaim(consumer, idle, count or self.cfg.max_unconsumed_groups, full_scan=True)
        return self._accept(entries)

    def ack(self, entry_ids: list[str], group_ids: list[str], outcome: str = "trained") -> int:
        """XACK + mark consumed + decrement the unconsumed gauge, atomically; returns effective ACKs.

        ``outcome`` (one of :data:`GROUP_OUTCOMES`) says what the consumer did with the groups; it
        is counted beside ``groups_consumed`` so the audit can tell trained from filtered groups.
        """
        if len(entry_ids) != len(group_ids):
            raise ValueError(f"{len(entry_ids)} entry ids vs {len(group_ids)} group ids")
        if outcome not in GROUP_OUTCOMES:
            raise ValueError(f"outcome {outcome!r} not in {GROUP_OUTCOMES}")
        if not entry_ids:
            return 0
        fields = f"groups_consumed,groups_{outcome}"
        n = int(self.queue.ack(self.client, [(e, g, fields) for e, g in zip(entry_ids, group_ids)]))
        with self._lock:
            for gid in group_ids:
                self._in_flight.pop(gid, None)
        return n

    def is_consumed(self, group_id: str) -> bool:
        return bool(self.client.sismember(self.keys.consumed, group_id))

    def _accept(self, entries: list[Entry]) -> list[tuple[str, Group]]:
        """Validate; skip (ACK and count) groups already consumed or already handed out here.

        The consumed set is asked only about entries that are not a first delivery of a FRESH one
        (put_group found their group id new when writing them), which is none in the steady state.
        """
        decoded = self.queue.decode_or_reject(entries)
        if not decoded:
            return []
        fresh = {e.id for e in entries if e.fresh}
        unsure = [g.group_id for entry_id, g in decoded if entry_id not in fresh]
        hits = self.client.smismember(self.keys.consumed, unsure) if unsure else []
        consumed_ids = {gid for gid, hit in zip(unsure, hits) if hit}
        out, duplicates = [], []
        with self._lock:
            for entry_id, group in decoded:
                consumed = entry_id not in fresh and group.group_id in consumed_ids
                other = self._in_flight.get(group.group_id)
                if consumed or (other is not None and other != entry_id):
                    duplicates.append(entry_id)
                else:
                    self._in_flight[group.group_id] = entry_id
                    out.append((entry_id, group))
        if duplicates:
            self.queue.ack(self.client, [(e, "", "groups_duplicate_skipped") for e in duplicates])
        return out
