"""Redis key names of one run: one namespace per run, every key starts with ``{run_id}:``.

Kept in one place (like PipelineRL's stream specs) so writers, readers and the monitor can
never disagree on a name. ``str(spec)`` of a :class:`StreamSpec` is its stream key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")   # no ':' or glob chars: SCAN patterns stay exact

PROMPT_READERS = "actors"     # consumer group of the prompts stream
GROUP_READERS = "learner"     # consumer group of the groups stream
PAYLOAD = b"data"             # the payload field of every payload-carrying stream entry
FRESH = b"fresh"              # field of a group entry whose group id put_group checked to be new


def entry_time(entry_id: str) -> float:
    """Unix seconds (ms resolution) at which Redis appended a stream entry: its id's first part
    (the server's clock; 0.0 for an id that is not ``<ms>-<seq>``)."""
    ms, _, _ = entry_id.partition("-")
    return int(ms) / 1000.0 if ms.isdigit() else 0.0


@dataclass(frozen=True)
class StreamSpec:
    """A stream read through one consumer group, plus its trim bookkeeping."""

    key: str      # the stream
    group: str    # the consumer group reading it
    acked: str    # ZSET of ACKed entry ids still in the stream, scored by id (what may be trimmed)

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True)
class RunKeys:
    """``RunKeys("run1").groups == "run1:groups"``; every key of the run derives from here."""

    run_id: str

    def __post_init__(self) -> None:
        if not RUN_ID_PATTERN.match(self.run_id):
            raise ValueError(f"run_id {self.run_id!r} must match {RUN_ID_PATTERN.pattern}")

    def _k(self, name: str) -> str:
        return f"{self.run_id}:{name}"

    @property
    def prompts(self) -> str:      # stream: PromptMsg payloads, read by group "actors"
        return self._k("prompts")

    @property
    def groups(self) -> str:       # stream: Group payloads, read by group "learner"
        return self._k("groups")

    @property
    def metrics(self) -> str:      # stream: one msgpack map per learner step
        return self._k("metrics")

    @property
    def deadletter(self) -> str:   # stream: rejected messages with the reason
        return self._k("deadletter")

    @property
    def version(self) -> str:      # hash: version, location, time (written only by the learner)
        return self._k("version")

    @property
    def versions(self) -> str:     # stream: history of published versions (also wakes waiters)
        return self._k("versions")

    @property
    def signals(self) -> str:      # stream (capped): wake-ups, e.g. the learner's need for the feeder
        return self._k("signals")

    @property
    def actors(self) -> str:       # hash: actor_id -> msgpack heartbeat
        return self._k("actors")

    @property
    def meta(self) -> str:         # hash: field -> JSON (config, model path, tokenizer path)
        return self._k("meta")

    @property
    def consumed(self) -> str:     # set: group ids the learner has ACKed (idempotency)
        return self._k("consumed")

    @property
    def fresh(self) -> str:        # set: group ids put once, not yet consumed (their entry is marked FRESH);
        return self._k("fresh")    # one dead-lettered on read stays (its id is unreadable): one per bad group

    @property
    def counters(self) -> str:     # hash: audit counters and the unconsumed-groups gauge
        return self._k("counters")

    @property
    def prompt_stream(self) -> StreamSpec:
        return StreamSpec(self.prompts, PROMPT_READERS, self._k("prompts:acked"))

    @property
    def group_stream(self) -> StreamSpec:
        return StreamSpec(self.groups, GROUP_READERS, self._k("groups:acked"))

    def all(self) -> list[str]:
        """Every key of the run (for deleting a run)."""
        return [self.prompts, self.groups, self.metrics, self.deadletter, self.version, self.versions, self.signals,
                self.actors, self.meta, self.consumed, self.fresh, self.counters, self.prompt_stream.acked,
                self.group_stream.acked]


def run_id_of(key: bytes | str) -> str | None:
    """The run id of a key of ours, or None."""
    text = key.decode() if isinstance(key, bytes) else key
    run_id, sep, _ = text.partition(":")
    return run_id if sep and RUN_ID_PATTERN.match(run_id) else None
