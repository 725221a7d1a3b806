"""The prompts stream: feeder -> actors (consumer group "actors").

A prompt stays pending in its actor's list until the actor stores the finished group (the
``put_group`` script ACKs it in the same atomic step), so an actor that dies mid-generation
loses nothing: after ``reclaim_idle_ms`` another actor's :meth:`take` reclaims the prompt.
"""

from __future__ import annotations

import time

import redis

from buffer.codec import decode_prompt, encode_prompt
from buffer.config import BufferConfig
from buffer.deadletter import DeadLetterLog
from buffer.keys import PAYLOAD, RunKeys
from buffer.messages import InvalidMessage, PromptMsg
from buffer.queue import StreamQueue
from buffer.scripts import Scripts


class PromptChannel:
    def __init__(self, client: redis.Redis, keys: RunKeys, cfg: BufferConfig, scripts: Scripts,
                 deadletters: DeadLetterLog):
        self.client, self.keys, self.cfg = client, keys, cfg
        self.queue: StreamQueue[PromptMsg] = StreamQueue(
            client, keys.prompt_stream, keys, cfg, scripts, deadletters,
            decode=lambda raw: decode_prompt(raw, cfg.max_message_bytes),
            rejected_counter="prompts_deadlettered")
        # An actor takes on every engine step while it generates: a reclaim scan each time was a round
        # trip per step (and per buffer) for prompts that become reclaimable only after reclaim_idle_ms
        # (60 s). Scanning every tenth of that, at most once a second, reclaims them as promptly.
        self._reclaim_every_s = min(1.0, cfg.reclaim_idle_ms / 10_000)
        self._next_reclaim = 0.0

    def put(self, prompts: list[PromptMsg]) -> list[str]:
        """Append prompts (one transaction) and count them as issued; returns their entry ids."""
        if not prompts:
            return []
        payloads = [encode_prompt(p) for p in prompts]
        for p, payload in zip(prompts, payloads):
            if len(payload) > self.cfg.max_message_bytes:
                raise InvalidMessage("oversize", f"prompt {p.prompt_id}: {len(payload)} bytes")
        pipe = self.client.pipeline(transaction=True)
        for payload in payloads:
            pipe.xadd(self.keys.prompts, {PAYLOAD: payload})
        pipe.hincrby(self.keys.counters, "prompts_issued", len(prompts))
        return [eid.decode() for eid in pipe.execute()[:-1]]

    def take(self, consumer: str, count: int, block_ms: int) -> list[tuple[str, PromptMsg]]:
        """Reclaimed prompts of dead actors first, then new ones; invalid ones are dead-lettered."""
        if count <= 0:
            return []
        entries = []
        if (now := time.monotonic()) >= self._next_reclaim:
            entries = self.queue.reclaim(consumer, self.cfg.reclaim_idle_ms, count, full_scan=False)
            # a full batch may have more behind it: look again at the next take
            self._next_reclaim = now if len(entries) == count else now + self._reclaim_every_s
        if len(entries) < count:
            entries += self.queue.read_new(consumer, count - len(entries), 0 if entries else block_ms)
        return self.queue.decode_or_reject(entries)

    def touch(self, consumer: str, entry_ids: list[str]) -> None:
        """Reset the idle time of prompts still being worked on (a keep-alive against reclaim)."""
        if entry_ids:
            self.client.xclaim(self.keys.prompts, self.queue.spec.group, consumer, 0, entry_ids, justid=True)

    def ack_rejected(self, pipe, entry_id: str) -> None:
        """ACK a prompt whose group was dead-lettered (on the caller's transaction)."""
        self.queue.ack(pipe, [(entry_id, "", "prompts_deadlettered")])
