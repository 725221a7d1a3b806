"""What a generation actor reports: its counters, its status row, and the heartbeat that keeps its prompts
its own.

The heartbeat writes the status row into the buffer's actors hash (``Monitor`` and the driver read it)
and touches every prompt the actor holds (in the engine, being scored, waiting for weights), so no
other actor reclaims a prompt that is being worked on: working is not dying. It runs from the loop
each iteration (at most every ``heartbeat_s``) and from a transport's long waits (its keepalive).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class ActorStats:
    prompts_done: int = 0
    tokens_generated: int = 0
    started: float = field(default_factory=time.monotonic)
    last_error: str = ""
    weight_loads: int = 0

    def note(self, error: str) -> None:
        """The actor's last error (status row), cut to 500 characters."""
        self.last_error = error[:500]


def status_row(actor_id: str, stats: ActorStats, version: int, *, in_flight: int, held: int, scoring: int) -> dict:
    """The status an actor reports (``GenerationActor.status``, the heartbeat)."""
    elapsed = max(time.monotonic() - stats.started, 1e-9)
    return {"actor_id": actor_id, "version": version, "pid": os.getpid(),
            "prompts_done": stats.prompts_done, "in_flight": in_flight, "held": held,
            "scoring": scoring, "tokens_per_s": stats.tokens_generated / elapsed,
            "weight_loads": stats.weight_loads, "last_error": stats.last_error,
            "time": time.time()}


class Heartbeat:
    """``buffers``: the run's buffer (its actors hash gets the status) and the evaluation one;
    ``status``: the row to write; ``prompts``: everything the actor holds (each with ``buffer`` and
    ``entry_id``)."""

    def __init__(self, actor_id: str, every_s: float, buffers: tuple, status: Callable[[], dict],
                 prompts: Callable[[], Iterable]):
        self.actor_id, self.every_s, self.buffers = actor_id, every_s, buffers
        self._status, self._prompts = status, prompts
        self._last = 0.0

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.every_s:
            self._last = now
            self.buffers[0].heartbeat(self.actor_id, self._status())
            # Working is not dying: reset the idle time of our prompts so no other actor reclaims them.
            prompts = list(self._prompts())
            for buffer in self.buffers:
                held = [j.entry_id for j in prompts if j.buffer is buffer]
                if held:
                    buffer.touch_prompts(self.actor_id, held)
