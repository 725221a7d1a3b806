"""The prompt feeder: dataset -> stages -> filters -> the buffer's `prompts` stream.

It runs in a thread beside the learner and issues each learner step's prompts by the learner's
published clock (``buffer.versions.StepClock``): a prompt for step s needs the policy version
step s starts at, minus max_lag (strict on-policy: exactly version s; off-policy: up to max_lag
versions early, so generation overlaps training; fixed lag k: each prompt of step s is pinned to
exactly version s - k, ``PromptMsg.pin_version``, and issued once that version exists).
Unpinned prompts are issued ``issue_ahead`` steps before they are admissible: actors hold them
until their version is published, so they start the moment it lands instead of after a feeder
tick and a read (the critical path, ``learner.step_path``). The clock is re-read every tick: the
lag guard changes it when it switches the run between off-policy and strict on-policy.

Each step first gets D_R prompts. Dynamic sampling rejects zero-advantage groups: the learner
publishes, while it reads, how many of the groups it could not use (``lost``: zero advantage,
stale, filtered; strict on-policy and fixed lag count only the step's own groups) in
``learner_need`` (meta hash, with a wake-up on the run's signals stream), and the feeder issues
one new prompt for the step per lost group at once, while the rest of the batch still generates.
Off-policy, the learner already reports the next step's losses while the current step trains.
A replacement is generated after the rest of the batch, a second round on the step's critical
path, so each batch also gets a few extra prompts up front (``launch.run.over_issue``): as many
as the rejection rate of recent steps lets through within a waste budget (``over_issue_waste``,
the expected fraction of a step's groups left over and stale in strict on-policy mode; a fixed
1.5x top-up once everything was answered left 3-5% of the groups stale). A shortfall nobody
reports as lost (a prompt dead-lettered by an actor, a resumed run) is topped up by the learner's
need once everything that can be answered was (``learner_need`` newer than that moment), or by
D_R/2 without any hint after ``hint_wait_s``.
Prompts that cannot fit the context are dead-lettered here with a reason, never dropped silently.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from buffer.messages import PromptMsg
from buffer.wake import stream_tails, wait_for_entries
from buffer.versions import StepClock
from launch.run.data import PromptRenderer
from launch.run.over_issue import RejectRate, extra_prompts
from rewards.problems import Problem


@dataclass
class _StepState:
    issued: int = 0
    replaced: int = 0                  # new prompts issued for groups the learner reported lost
    extra: int = 0                     # prompts issued with the batch for the losses expected
    # prompts issued per version they need: a step's prompts may carry several, since the clock they were
    # issued by can change in between (the lag guard switching modes, a step with skipped updates)
    by_min_version: dict[int, int] = field(default_factory=dict)
    answered_at: float | None = None   # unix time all issued prompts were first seen answered


@dataclass
class FeedStats:
    issued: int = 0
    too_long: int = 0
    filtered_solved: int = 0
    per_step: dict[int, _StepState] = field(default_factory=dict)

    @property
    def over_issued(self) -> int:
        """Extra prompts issued with the batches (launch.run.over_issue)."""
        return sum(s.extra for s in self.per_step.values())


class PromptFeeder:
    def __init__(self, buffer, problems: list[Problem], renderer: PromptRenderer, *, rollout_batch: int,
                 group_size: int, temperature: float, max_model_len: int,
                 stage_at: Callable[[int], tuple[int, int]], seed: int = 0, hint_wait_s: float = 2.0,
                 issue_ahead: int = 1, over_issue_waste: float = 0.0):
        """``issue_ahead``: unpinned steps issued before their version is published; ``over_issue_waste``:
        the expected stale fraction extra prompts may cost (0: none; module docstring)."""
        self.buffer, self.renderer = buffer, renderer
        self.rollout_batch = rollout_batch
        # what every prompt asks the actors for (the run's settings)
        self.group_size, self.temperature, self.max_model_len = group_size, temperature, max_model_len
        self.stage_at = stage_at                  # step -> (stage index, response budget)
        self.problems = list(problems)
        self.rng = random.Random(seed)
        self.order: list[Problem] = []
        self.solved: set[str] = set()             # online filter: accuracy reached 1
        self.hint_wait_s = hint_wait_s
        self.issue_ahead = issue_ahead
        self.over_issue_waste = over_issue_waste
        self.reject_rate = RejectRate()
        self.stats = FeedStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._serial = 0

    # ---- dataset order, with the online filter applied at each epoch
    def _next_problem(self) -> Problem:
        if not self.order:
            pool = [p for p in self.problems if p.id not in self.solved] or self.problems
            self.order = pool[:]
            self.rng.shuffle(self.order)
        return self.order.pop()

    def mark_solved(self, problem_ids) -> None:
        self.solved.update(problem_ids)
        self.stats.filtered_solved = len(self.solved)
        self.order = [p for p in self.order if p.id not in self.solved]

    # ---- issuing
    def issue(self, step: int, count: int, clock: StepClock) -> int:
        stage, max_tokens = self.stage_at(step)
        min_version, pin = clock.min_version(step), clock.pin_version(step)
        msgs = []
        for _ in range(count):
            p = self._next_problem()
            ids = np.asarray(self.renderer.ids(p), dtype=np.int32)
            self._serial += 1
            prompt_id = f"s{step}-{self._serial}-{p.id}"
            if len(ids) + max_tokens > self.max_model_len:
                self.buffer.dead_letter("feeder", "prompt_too_long",
                                        detail=f"{prompt_id}: {len(ids)} prompt + {max_tokens} response tokens "
                                               f"> max_model_len {self.max_model_len}")
                self.stats.too_long += 1
                continue
            msgs.append(PromptMsg(prompt_id=prompt_id, data_source=p.data_source, prompt_ids=ids,
                                  answer=p.answer, n_samples=self.group_size, max_tokens=max_tokens,
                                  step=step, min_version=min_version, stage=stage, temperature=self.temperature,
                                  meta={"problem_id": p.id}, pin_version=pin))
        if msgs:
            self.buffer.put_prompts(msgs)
        self.stats.issued += len(msgs)
        state = self.stats.per_step.setdefault(step, _StepState())
        state.issued += len(msgs)
        needs = min_version if pin is None else pin
        state.by_min_version[needs] = state.by_min_version.get(needs, 0) + len(msgs)
        return len(msgs)

    def tick(self) -> None:
        """Issue whatever is due now (called by the feeder thread on every version and learner signal)."""
        version, _ = self.buffer.get_version()
        # two fields, not the whole meta hash: it holds the config
        meta = self.buffer.get_meta("learner_clock", "learner_need")
        if "learner_clock" not in meta:
            return                                  # the learner has not started yet
        clock = StepClock(**meta["learner_clock"])
        learner_step = clock.step_at(version)
        ahead = self.issue_ahead if clock.fixed_lag is None else 0   # a pin must exist when it is taken
        need = meta.get("learner_need")
        need = need if isinstance(need, dict) and "step" in need else None
        collected = None if need is None else need.get("collected")
        if isinstance(collected, dict):       # the last step the learner finished collecting
            self.reject_rate.record(collected["step"], self.rollout_batch, collected["lost"])
        for step in range(learner_step, clock.newest_admissible_step(version) + ahead + 1):
            if step not in self.stats.per_step:
                extra = extra_prompts(self.rollout_batch, self.reject_rate.rate, self.over_issue_waste)
                self.issue(step, self.rollout_batch + extra, clock)
                self.stats.per_step[step].extra = extra
        if need is not None and need["step"] >= learner_step and need["step"] in self.stats.per_step:
            self._replace_lost(need["step"], need.get("lost", 0), clock)
        state = self.stats.per_step[learner_step]
        need = need if need is not None and need["step"] == learner_step else None
        if self._answerable_outstanding(version) > 0:
            state.answered_at = None
            return
        now = time.time()
        if state.answered_at is None:
            state.answered_at = now
        if need is not None:
            # everything that can be answered is: top up only if the learner said so since then
            if need.get("groups", 0) > 0 and need.get("time", 0.0) > state.answered_at:
                self._top_up(state, learner_step, need["groups"], now, clock)
        elif now - state.answered_at > self.hint_wait_s:
            self._top_up(state, learner_step, max(self.rollout_batch // 2, 1), now, clock)

    def _replace_lost(self, step: int, lost: int, clock: StepClock) -> None:
        """One new prompt per group of ``step`` the learner could not use, beyond the extras issued for them:
        the step keeps exactly D_R usable ones. Reported while the learner collects the step, and off-policy
        already while the step before trains (``learner.admission.Admission.look_ahead``)."""
        state = self.stats.per_step[step]
        owed = lost - state.extra
        if owed > state.replaced:
            self.issue(step, owed - state.replaced, clock)
            state.replaced = owed             # too-long ones were dead-lettered: the need fallback covers them

    def _answerable_outstanding(self, version: int) -> int:
        """Outstanding prompts an actor may start now: issued ahead of their version ones wait for it.

        Counted by the version each prompt was stamped with, not the step's latest: prompts issued
        ahead by an off-policy clock can need a version the step never reaches once the guard
        switches to on-policy; counted as answerable, they held back every top-up and the run hung."""
        waiting = sum(n for s in self.stats.per_step.values() for needs, n in s.by_min_version.items()
                      if needs > version)
        return max(self.outstanding() - waiting, 0)

    def _top_up(self, state: _StepState, step: int, count: int, now: float, clock: StepClock) -> None:
        issued = self.issue(step, count, clock)      # 0 if every prompt was too long (dead-lettered)
        state.answered_at = None if issued else now

    def outstanding(self) -> int:
        """Prompts issued but not yet turned into a group (or dead-lettered)."""
        c = self.buffer.counts()   # the run's counters, so prompts of a killed incarnation count too
        return max(c["prompts_issued"] - c["groups_written"] - c.get("prompts_deadlettered", 0), 0)

    def _resume(self) -> None:
        """A rerun of a run that already issued prompts (the driver was killed): every step admissible
        at the published version was issued by the previous incarnation (its prompts are still in
        the stream, or answered), so only later steps get new batches; a shortfall is topped up as
        usual. Serials continue past the old ones so prompt ids (= group ids) stay unique."""
        c = self.buffer.counts()
        if c["prompts_issued"] == 0:
            return
        version, _ = self.buffer.get_version()
        clock = self.buffer.get_meta("learner_clock").get("learner_clock")
        if clock is None:
            raise RuntimeError("resuming a run whose learner has published no clock: start the learner first")
        clock = StepClock(**clock)
        ahead = self.issue_ahead if clock.fixed_lag is None else 0
        for step in range(clock.newest_admissible_step(version) + ahead + 1):
            self.stats.per_step.setdefault(step, _StepState())
        self._serial = c["prompts_issued"] + c["deadlettered"]

    # ---- thread
    def start(self) -> PromptFeeder:
        self._resume()
        self._thread = threading.Thread(target=self._loop, name="prompt-feeder", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        keys = [self.buffer.keys.versions, self.buffer.keys.signals]
        while not self._stop.is_set():
            try:
                tails = stream_tails(self.buffer.client, keys)    # before the tick: nothing slips between
                self.tick()
                # until a version is published or the learner signals (its need), at most 0.25 s
                # (the hint_wait_s fallback needs the clock)
                wait_for_entries(self.buffer.client, tails, 250)
            except Exception as exc:  # the driver sees it in the log; the learner will time out
                print(f"[feeder] error: {type(exc).__name__}: {exc}", flush=True)
                self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
