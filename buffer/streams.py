"""RunBuffer: the one object actors, learner and feeder hold to talk to a run's Redis.

A thin facade over small single-purpose parts (prompts.py, groups.py, versions.py,
deadletter.py, telemetry.py), all sharing one client and the run's key spec (keys.py). Every
method is safe to call from several threads (redis-py clients are thread-safe) and several
processes (the atomic steps are Lua scripts or MULTI transactions on the server).

    with RunBuffer.from_url(url, "run1") as buf:
        buf.put_prompts([...])                                  # feeder
        for entry_id, prompt in buf.take_prompts("actor-0", 8):  # actor
            ...; buf.put_group(group, entry_id)                 # ACKs the prompt atomically
        batch = buf.take_groups("learner", 16)                  # learner
        ...; buf.ack_groups([e for e, _ in batch], [g.group_id for _, g in batch])
"""

from __future__ import annotations

import threading
from typing import Callable

import redis

from buffer.config import BufferConfig
from buffer.connection import connect
from buffer.deadletter import DeadLetterLog
from buffer.groups import GroupChannel
from buffer.keys import RunKeys
from buffer.messages import Group, PromptMsg
from buffer.prompts import PromptChannel
from buffer.scripts import Scripts
from buffer.telemetry import Telemetry
from buffer.versions import VersionStore, VersionWatch


class RunBuffer:
    def __init__(self, client: redis.Redis, run_id: str, cfg: BufferConfig | None = None):
        self.client, self.cfg = client, cfg or BufferConfig()
        self.keys = RunKeys(run_id)
        self.run_id = run_id
        scripts = Scripts(client)
        self._deadletters = DeadLetterLog(client, self.keys, self.cfg)
        self._prompts = PromptChannel(client, self.keys, self.cfg, scripts, self._deadletters)
        self._groups = GroupChannel(client, self.keys, self.cfg, scripts, self._deadletters, self._prompts)
        self._versions = VersionStore(client, self.keys, scripts)
        self._telemetry = Telemetry(client, self.keys, self.cfg)
        self._acks_since_trim = 0
        self._trim_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, run_id: str, cfg: BufferConfig | None = None) -> RunBuffer:
        return cls(connect(url), run_id, cfg)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RunBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- prompts (feeder -> actors)
    def put_prompts(self, prompts: list[PromptMsg]) -> list[str]:
        return self._prompts.put(prompts)

    def reject_prompt(self, entry_id: str, source: str, reason: str, detail: str = "",
                      raw: bytes | None = None) -> None:
        """Dead-letter a taken prompt that cannot be answered (too long for the engine, its reward
        failed) and ACK it, in one transaction: counted as dead-lettered, never generated again."""
        pipe = self.client.pipeline(transaction=True)
        self._deadletters.add(pipe, source, reason, raw, detail, entry_id=entry_id, stream=self.keys.prompts)
        self._prompts.ack_rejected(pipe, entry_id)
        pipe.execute()

    def take_prompts(self, consumer: str, count: int, block_ms: int = 1000) -> list[tuple[str, PromptMsg]]:
        """Reclaimed prompts of dead actors (idle > reclaim_idle_ms) first, then new ones."""
        return self._prompts.take(consumer, count, block_ms)

    def touch_prompts(self, consumer: str, entry_ids: list[str]) -> None:
        """Keep-alive for prompts whose generation outlasts ``reclaim_idle_ms``."""
        self._prompts.touch(consumer, entry_ids)

    # ---- groups (actors -> learner)
    def put_group(self, group: Group, prompt_entry_id: str | None = None) -> str:
        """Store ``group`` and ACK its prompt in one atomic step, waiting for room (backpressure).

        Returns the entry id, or '' when not stored: a duplicate answer to an already answered
        prompt (dropped, counted) or an oversize payload (dead-lettered).
        Raises BackpressureTimeout after ``backpressure_timeout_s``.
        """
        return self._groups.put(group, prompt_entry_id)

    def put_groups(self, items: list[tuple[Group, str | None]]) -> list[str]:
        """:meth:`put_group` for several (group, prompt entry id) pairs in one round trip, each group
        still stored and its prompt ACKed atomically; one entry id (or '') per pair, in order."""
        return self._groups.put_many(items)

    def take_groups(self, consumer: str, count: int, block_ms: int = 1000) -> list[tuple[str, Group]]:
        return self._groups.take(consumer, count, block_ms)

    def pending_groups(self, consumer: str) -> list[tuple[str, Group]]:
        """This consumer's delivered-but-un-ACKed groups (re-delivery after a learner restart)."""
        return self._groups.pending(consumer)

    def reclaim_groups(self, consumer: str, min_idle_ms: int | None = None,
                       count: int | None = None) -> list[tuple[str, Group]]:
        """Groups idle in other (dead) consumers' pending lists, now delivered to ``consumer``."""
        return self._groups.reclaim(consumer, min_idle_ms, count)

    def ack_groups(self, entry_ids: list[str], group_ids: list[str], outcome: str = "trained") -> None:
        """ACK consumed groups; ``outcome``: trained | filtered (zero advantage) | stale | evaluated."""
        self._groups.ack(entry_ids, group_ids, outcome)
        with self._trim_lock:
            self._acks_since_trim += len(entry_ids)
            due = self._acks_since_trim >= self.cfg.trim_every
            if due:
                self._acks_since_trim = 0
        if due:
            self.trim()

    def is_consumed(self, group_id: str) -> bool:
        return self._groups.is_consumed(group_id)

    def trim(self) -> dict[str, int]:
        """Drop consumed entries beyond the retention settings (runs every ``trim_every`` ACKs)."""
        return {"prompts": self._prompts.queue.trim(self.cfg.retention_prompts),
                "groups": self._groups.queue.trim(self.cfg.retention_groups)}

    def stream_position(self) -> dict:
        """What a learner checkpoint stores to check, on resume, that it sees the same stream."""
        pipe = self.client.pipeline(transaction=True)
        pipe.xinfo_groups(self.keys.groups)
        pipe.xpending(self.keys.groups, self.keys.group_stream.group)
        pipe.scard(self.keys.consumed)
        groups, pending, consumed = pipe.execute()
        info = next(g for g in groups if _text(g["name"]) == self.keys.group_stream.group)
        return {"run_id": self.run_id, "stream": self.keys.groups, "group": self.keys.group_stream.group,
                "last_delivered_id": _text(info["last-delivered-id"]), "pending": int(pending["pending"]),
                "consumed": int(consumed)}

    # ---- versions
    def get_version(self) -> tuple[int, str]:
        """(version, weights location); (0, '') before the first publish."""
        return self._versions.get()

    def publish_version(self, version: int, location: str) -> None:
        """Atomically publish (version, location); ValueError if ``version`` < current."""
        self._versions.publish(version, location)

    def wait_for_version(self, at_least: int, timeout_s: float) -> int:
        return self._versions.wait(at_least, timeout_s)

    def watch_version(self, on_change: Callable[[], None] | None = None) -> VersionWatch:
        """A thread that keeps the newest (version, location) current (``buffer.versions.VersionWatch``);
        ``on_change()`` runs in it after each read a publish woke."""
        return VersionWatch(self._versions, on_change=on_change)

    # ---- dead letters, metrics, heartbeats, meta
    def dead_letter(self, source: str, reason: str, raw: bytes | None = None, detail: str = "") -> None:
        self._deadletters.record(source, reason, raw, detail)

    def dead_letters(self, count: int = 100) -> list[dict]:
        return self._deadletters.recent(count)

    def write_metrics(self, row: dict) -> str:
        return self._telemetry.write_metrics(row)

    def heartbeat(self, actor_id: str, status: dict) -> None:
        self._telemetry.heartbeat(actor_id, status)

    def set_meta(self, **fields) -> None:
        self._telemetry.set_meta(**fields)

    def announce_meta(self, **fields) -> None:
        """``set_meta`` plus a wake-up on the run's signals stream (``keys.signals``)."""
        self._telemetry.announce_meta(**fields)

    def get_meta(self, *fields: str) -> dict:
        return self._telemetry.get_meta(*fields)

    def counts(self) -> dict:
        """Audit figures: every issued prompt is answered, dead-lettered or still pending."""
        return read_counts(self.client, self.keys)


def read_counts(client: redis.Redis, keys: RunKeys) -> dict:
    """Counters + live figures of a run (read-only; shared with the monitor)."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.counters)
    pipe.xlen(keys.deadletter)
    pipe.scard(keys.consumed)
    for spec in (keys.prompt_stream, keys.group_stream):
        pipe.xlen(spec.key)
        pipe.xpending(spec.key, spec.group)
    raw, n_dead, n_consumed, n_prompts, p_pending, n_groups, g_pending = pipe.execute(raise_on_error=False)
    counters = {k.decode(): int(v) for k, v in raw.items()}
    out = {name: counters.get(name, 0) for name in (
        "prompts_issued", "prompts_deadlettered", "groups_written", "groups_consumed",
        "groups_unconsumed", "groups_deadlettered", "groups_duplicate_dropped",
        "groups_duplicate_skipped", "deadlettered")}
    out.update({
        "prompts_pending": _pending(p_pending), "groups_pending": _pending(g_pending),
        "consumed_ids": int(n_consumed), "deadletter_len": int(n_dead),
        "prompts_len": int(n_prompts) if isinstance(n_prompts, int) else 0,
        "groups_len": int(n_groups) if isinstance(n_groups, int) else 0,
    })
    return out


def _pending(reply) -> int:
    return int(reply["pending"]) if isinstance(reply, dict) else 0   # NOGROUP (no stream yet) -> 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
