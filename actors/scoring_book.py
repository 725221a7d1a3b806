"""ScoringBook: a generation actor's finished groups between the engine and the buffer.

A group enters when its request finishes and is sent to be scored; it leaves exactly once: stored
(with its prompt's ACK, one transaction), dead-lettered (its reward failed), or dropped with its prompt
left pending in the prompts stream. While in the book its prompt is kept alive (the actor's heartbeat
touches it), so no other actor reclaims it.

The book is updated before any Redis write, so a write that raises cannot make a group be handled
twice (a put_groups error once left a dead-lettered group in the list: the next flush dead-lettered its
prompt again). After a failed write:
  * a dead-letter is not retried: reject_prompt is one transaction (dead-letter + ACK), so the prompt is
    either dead-lettered once or still pending, while a retry after a lost reply would dead-letter it
    twice. Still pending and no longer touched, it is reclaimed after reclaim_idle_ms and scored again;
  * a store is retried at later flushes, at most once every PUT_RETRY_S: the put script drops a second
    answer to a prompt already ACKed, so a retry after a lost reply stores nothing twice, and a Redis
    blip or a slow learner (BackpressureTimeout) does not throw the generated group away. After
    PUT_ATTEMPTS failures it is dropped: its prompt, pending, is reclaimed and generated again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

from buffer.codec import encode_group
from buffer.messages import Group
from rewards.result import RewardSystemError

PUT_ATTEMPTS = 3
PUT_RETRY_S = 1.0


@dataclass
class Scoring:
    buffer: object
    entry_id: str
    group: Group
    future: Future | None = None     # scores the groups of one call: (per group results or exception, time)
    index: int = 0                   # this group's place among them
    call_size: int = 1               # how many groups that call holds
    scored: bool = False             # rewards are in the group: waiting to be stored
    put_failures: int = 0
    retry_at: float = 0.0            # monotonic time of the next store attempt


class ScoringBook:
    """``submit(groups)`` starts one scoring call and returns its future; ``note(text)`` records an error
    (the actor's last_error)."""

    def __init__(self, submit: Callable[[list[Group]], Future], note: Callable[[str], None]):
        self._submit, self._note = submit, note
        self.jobs: list[Scoring] = []

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self):
        return iter(self.jobs)

    def add(self, calls: list[list[Scoring]]) -> None:
        """Send each call (the groups it scores together) and keep its groups."""
        for call in calls:
            self._send(call)
            self.jobs += call

    def _send(self, call: list[Scoring]) -> None:
        future = self._submit([job.group for job in call])
        for i, job in enumerate(call):
            job.future, job.index, job.call_size = future, i, len(call)

    def wait(self, timeout: float) -> None:
        """Until a scoring call finishes or a store is due, ``timeout`` at most."""
        scoring = [job.future for job in self.jobs if not job.scored]
        if scoring:
            wait(scoring, timeout=timeout, return_when=FIRST_COMPLETED)
        elif self.jobs:
            time.sleep(min(timeout, max(0.0, min(job.retry_at for job in self.jobs) - time.monotonic())))

    def flush(self, block: bool) -> int:
        """Store every scored group (those of one buffer in one round trip), dead-letter those whose reward
        failed; with ``block``, wait for every call first. -> groups stored."""
        stored = 0
        while True:
            failed, ready = self._settle(block)
            for job, exc in failed:
                self._reward_failed(job, exc)
            stored += self._store(ready)
            if not block or not self.jobs:
                return stored
            self.wait(PUT_RETRY_S)        # groups of a failed call, sent again alone; stores to retry

    def _settle(self, block: bool) -> tuple[list[tuple[Scoring, Exception]], list[Scoring]]:
        """Take what is done out of the book (first: nothing below may run twice): (reward failures,
        groups to store now)."""
        failed, ready, keep, now = [], [], [], time.monotonic()
        for job in self.jobs:
            if job.scored:
                (ready if job.retry_at <= now else keep).append(job)
                continue
            if not (block or job.future.done()):
                keep.append(job)
                continue
            try:
                per_group, job.group.trace["scored"] = job.future.result()
            except Exception as exc:
                if job.call_size > 1:   # the call failed as a whole (a worker dead past its retries, a timeout):
                    self._send([job])   # each group is scored again alone, once, so only one failing alone is lost
                    keep.append(job)
                else:
                    failed.append((job, exc))
                continue
            results = per_group[job.index]
            if not isinstance(results, Exception) and len(results) != len(job.group.responses):
                results = ValueError(f"{len(results)} rewards for {len(job.group.responses)} responses")
            if isinstance(results, Exception):
                failed.append((job, results))
                continue
            for resp, result in zip(job.group.responses, results):
                resp.reward = float(result.reward)
                resp.reward_info = {"reason": result.reason, "extracted": result.extracted}
            job.scored = True
            ready.append(job)
        self.jobs = keep
        return failed, ready

    def _store(self, ready: list[Scoring]) -> int:
        by_buffer: dict[int, list[Scoring]] = {}
        for job in ready:
            by_buffer.setdefault(id(job.buffer), []).append(job)
        stored = 0
        for jobs in by_buffer.values():
            try:
                jobs[0].buffer.put_groups([(job.group, job.entry_id) for job in jobs])
            except Exception as exc:  # noqa: BLE001 (Redis down, backpressure: kept, tried again; module docstring)
                self._put_failed(jobs, exc)
                continue
            stored += len(jobs)
        return stored

    def _put_failed(self, jobs: list[Scoring], exc: Exception) -> None:
        self._note(f"put_groups: {type(exc).__name__}: {exc}")
        for job in jobs:
            job.put_failures += 1
            job.retry_at = time.monotonic() + PUT_RETRY_S
            if job.put_failures < PUT_ATTEMPTS:
                self.jobs.append(job)
            else:
                print(f"[lagrl] group {job.group.group_id} not stored after {PUT_ATTEMPTS} attempts "
                      f"({type(exc).__name__}: {exc}); its prompt stays pending, to be reclaimed", flush=True)

    def _reward_failed(self, job: Scoring, exc: Exception) -> None:
        """The scorers turn bad answers into reasons; an exception is the reward system failing (a worker dead
        past its retries, a call past its limit, no sandbox). The group cannot be judged: its prompt is
        dead-lettered (counted, with the group as raw) rather than trained on a fake 0."""
        reason = exc.reason if isinstance(exc, RewardSystemError) else "reward_error"
        detail = f"group {job.group.group_id}: {type(exc).__name__}: {exc}"[:2000]
        self._note(f"{reason}: {detail}")
        try:
            job.buffer.reject_prompt(job.entry_id, "reward", reason, detail=detail, raw=encode_group(job.group))
        except Exception as write_exc:  # noqa: BLE001 (not retried: the prompt stays pending; module docstring)
            self._note(f"dead-letter of {job.group.group_id} ({reason}) not written: "
                       f"{type(write_exc).__name__}: {write_exc}")
