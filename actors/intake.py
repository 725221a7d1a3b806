"""How a generation actor takes prompts from the buffer: which prompt stream to read when, and the prompts
it refuses at once.

Evaluation prompts first (a handful, and a blocked evaluation stalls the driver), then training ones.
Never blocking: an idle actor waits for any new prompt or version afterwards (the actor's
``_wait_for_work``). A stream is read when it grew (``StreamWatch``), when its last read filled its
count, and every :data:`TAKE_EVERY_S` (the reclaim of a dead actor's prompts appends nothing;
StreamWatch's docstring). A prompt that cannot run here is dead-lettered at once: too long for the
engine (the feeder's rule), or pinned to a version while the transport serves only the newest.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from actors.requests import Held
from actors.transport.registry import older_versions_fix
from buffer.keys import entry_time
from buffer.wake import StreamWatch

TAKE_EVERY_S = 0.2     # an actor reads its prompt streams at least this often, whether they grew or not


class Intake:
    """``buffer``, ``eval_buffer``: the run's and its evaluation's (read first); ``on_grow``: called when a
    stream grew (wakes an idle actor); ``serves_pins``: the transport loads versions older than the newest."""

    def __init__(self, actor_id: str, max_model_len: int, buffer, eval_buffer, on_grow: Callable[[], None],
                 serves_pins: bool, transport_name: str):
        self.actor_id, self.max_model_len, self.buffers = actor_id, max_model_len, (eval_buffer, buffer)
        self.serves_pins, self.transport_name = serves_pins, transport_name
        # read a prompt stream only when it grew (or on the timer): not twice per engine step
        self.watch = StreamWatch(buffer.client, [b.keys.prompts for b in self.buffers], on_grow=on_grow)
        self._full: set[str] = set()            # prompt streams whose last read filled its count
        self._last_take = 0.0
        self.took_all = False                   # the last take filled its room (more prompts may wait)

    def take(self, room: int) -> list[Held]:
        """Up to ``room`` prompts from the streams that may have some, as held prompts (the refused ones
        dead-lettered)."""
        now = time.monotonic()
        read_all = now - self._last_take >= TAKE_EVERY_S
        if read_all:
            self._last_take = now
        taken = []
        for buffer in self.buffers:
            key, want = buffer.keys.prompts, room - len(taken)
            if want <= 0:
                break                  # before grew(), which clears the mark: the stream is read next time
            if not (self.watch.grew(key) or key in self._full or read_all):
                continue
            got = buffer.take_prompts(self.actor_id, count=want, block_ms=0)
            self._full.discard(key)
            if len(got) >= want:
                self._full.add(key)
            taken += [(buffer, e, p) for e, p in got]
        taken_at = time.time()
        self.took_all = len(taken) >= room           # more may be queued: read again before waiting
        held = []
        for buffer, entry_id, prompt in taken:
            if len(prompt.prompt_ids) + prompt.max_tokens > self.max_model_len:   # the feeder's rule
                buffer.reject_prompt(entry_id, self.actor_id, "prompt_too_long", detail=(
                    f"{prompt.prompt_id}: {len(prompt.prompt_ids)} prompt + {prompt.max_tokens} response "
                    f"tokens > max_model_len {self.max_model_len}"))
                continue
            if prompt.pin_version is not None and not self.serves_pins:
                buffer.reject_prompt(entry_id, self.actor_id, "pinned_version_unsupported", detail=(
                    f"{prompt.prompt_id}: pinned to version {prompt.pin_version}, but the "
                    f"{self.transport_name} serves only the newest version: run fixed lag with "
                    f"{older_versions_fix()}"))
                continue
            held.append(Held(buffer, entry_id, prompt, {"issued": entry_time(entry_id), "taken": taken_at}))
        return held

    def stop(self) -> None:
        self.watch.stop()
