"""The lag guard: a small pure state machine over per-step metrics (issue 22).

Call ``observe(step_metrics)`` once per learner step, after the step, with that step's metrics
row; the answer is the mode of the *next* step:

    off_policy  the run's configured mode (max_lag, N_reuse, D_T, clip-higher as configured)
    on_policy   strict on-policy (DESIGN.md §3): max_lag 0, N_reuse 1, D_T = D_R, eps_high = eps_low

Transitions (rules: ``learner.guard_rules``):

* off_policy -> on_policy (event ``fallback``) as soon as any rule fires. Level rules need their
  condition on ``persist_steps`` consecutive steps, so one noisy step does not switch.
* on_policy -> off_policy (event ``recover``) at the first observed step where both hold:
  at least ``hold_steps`` steps were trained on-policy, and no rule's condition held on any of the
  last ``recover_quiet_steps`` steps, judged step by step (persistence 1). This is the hysteresis:
  leaving needs a sustained bad signal, coming back needs a sustained clean one. The quiet
  streak may overlap the hold; rules firing while on-policy only reset it (no new event). The
  slope window still spans the pre-fallback collapse for ``slope_window`` steps, so a falling
  entropy also has to level out before a return.

A step that trained no token (``tokens/trained`` 0: every update had an empty loss mask) is not
observed at all: its entropy is NaN, there is no evidence either way.

The guard knows nothing of engines, feeders or buffers: the learner applies the mode (and drops
groups sampled beyond the new lag bound), writes ``Decision.metrics`` into the step's metrics row,
prints ``event.message()``, and puts ``event.to_dict()`` in the metrics stream and the summary.
``state_dict`` / ``load_state_dict`` carry everything (JSON-safe) so a resumed learner continues
in the same mode, with the same hold, streak, starting entropy and clip fraction, window and
event log.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from learner.config import GuardConfig
from learner.guard_rules import ENTROPY_KEY, RULES, Baseline, Fired, evaluate, value

Mode = Literal["off_policy", "on_policy"]
TRAINED_KEY = "tokens/trained"   # a step that trained 0 tokens is not observed (no evidence either way)
_STATE_VERSION = 2          # 2: start_clip_samples (version-1 states load with none)


@dataclass(frozen=True)
class GuardEvent:
    """A mode switch: when, which way, the rules that fired (fallback) and the watched values."""

    step: int
    kind: Literal["fallback", "recover"]
    from_mode: Mode
    to_mode: Mode
    fired: tuple[Fired, ...] = ()
    values: dict[str, float] = field(default_factory=dict)   # watched signals at this step
    reason: str = ""

    def message(self) -> str:
        """One stdout line: the switch, then each rule with the values that fired it."""
        head = f"[guard] step {self.step}: {self.from_mode} -> {self.to_mode} ({self.kind})"
        if self.fired:
            return head + ": " + "; ".join(f"{f.rule}: {f.message}" for f in self.fired)
        return head + ": " + self.reason

    def to_dict(self) -> dict[str, Any]:
        """msgpack/JSON-friendly form (str keys, floats) for the metrics stream and summary."""
        return {"step": self.step, "kind": self.kind, "from_mode": self.from_mode, "to_mode": self.to_mode,
                "rules": [f.rule for f in self.fired], "fired": [f.to_dict() for f in self.fired],
                "values": dict(self.values), "reason": self.reason, "message": self.message()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GuardEvent:
        return cls(int(d["step"]), d["kind"], d["from_mode"], d["to_mode"],
                   tuple(Fired.from_dict(f) for f in d["fired"]),
                   {k: float(v) for k, v in d["values"].items()}, str(d["reason"]))


@dataclass(frozen=True)
class Decision:
    """The mode for the next step, the switch event if this step caused one, per-step metrics."""

    mode: Mode
    event: GuardEvent | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class Guard:
    """Watches per-step metrics; see the module docstring for the transitions."""

    def __init__(self, cfg: GuardConfig, entropy_target: float | None = None):
        self.cfg = cfg
        self.entropy_target = entropy_target
        self.mode: Mode = "off_policy"
        self.steps_seen = 0
        self.on_policy_steps = 0          # steps trained on-policy since the last fallback
        self.quiet_steps = 0              # consecutive steps with no rule condition (persistence 1)
        self.start_samples: list[float] = []
        self.start_clip_samples: list[float] = []   # off-policy steps only: the level the run is built for
        self.history: deque[dict[str, float]] = deque(maxlen=self._window())
        self.events: list[GuardEvent] = []

    def _window(self) -> int:
        return max(self.cfg.slope_window, self.cfg.persist_steps)

    @property
    def start_entropy(self) -> float | None:
        """Mean entropy of the first ``start_steps`` steps with one; None until that many."""
        if len(self.start_samples) < self.cfg.start_steps:
            return None
        return math.fsum(self.start_samples) / len(self.start_samples)

    @property
    def start_clip(self) -> float | None:
        """Mean clip fraction of the first ``start_steps`` off-policy steps; None until that many."""
        if len(self.start_clip_samples) < self.cfg.start_steps:
            return None
        return math.fsum(self.start_clip_samples) / len(self.start_clip_samples)

    @property
    def baseline(self) -> Baseline:
        return Baseline(self.start_entropy, self.entropy_target, self.start_clip)

    def _watched(self, row: Mapping[str, Any]) -> dict[str, float]:
        keys = (ENTROPY_KEY, "entropy/coef", self.cfg.clip_key, *self.cfg.mismatch_keys)
        return {k: v for k in keys if (v := value(row, k)) is not None}

    def observe(self, step_metrics: Mapping[str, Any], step: int | None = None) -> Decision:
        """Record one learner step's metrics; return the mode for the next step.

        ``step`` labels events (default: ``step_metrics['step']`` if present, else the count of
        observed steps). A disabled guard records nothing and always answers off_policy.
        """
        if not self.cfg.enabled:
            return Decision("off_policy")
        if value(step_metrics, TRAINED_KEY) == 0:
            # no token trained: its entropy is NaN (not 0), nothing was measured; recording the step
            # would break persistence streaks and the slope window, or count towards the hold
            return Decision(self.mode, None, self._metrics([]) | {"guard/skipped_no_tokens": 1.0})
        step = int(step if step is not None else step_metrics.get("step", self.steps_seen))
        row = self._watched(step_metrics)
        self.steps_seen += 1
        if ENTROPY_KEY in row and len(self.start_samples) < self.cfg.start_steps:
            self.start_samples.append(row[ENTROPY_KEY])
        clip = row.get(self.cfg.clip_key)
        if self.mode == "off_policy" and clip is not None and len(self.start_clip_samples) < self.cfg.start_steps:
            self.start_clip_samples.append(clip)
        self.history.append(row)
        history, base = list(self.history), self.baseline

        fired = evaluate(history, self.cfg, base)
        raw = fired if self.cfg.persist_steps == 1 else evaluate(history, self.cfg, base, persist=1)
        self.quiet_steps = 0 if raw else self.quiet_steps + 1
        event = None
        if self.mode == "off_policy":
            if fired:
                event = self._switch(step, "fallback", "on_policy", tuple(fired), row, "")
        else:
            self.on_policy_steps += 1
            if self.on_policy_steps >= self.cfg.hold_steps and self.quiet_steps >= self.cfg.recover_quiet_steps:
                reason = (f"{self.on_policy_steps} on-policy steps (hold {self.cfg.hold_steps}), rules quiet "
                          f"for {self.quiet_steps} (need {self.cfg.recover_quiet_steps})")
                event = self._switch(step, "recover", "off_policy", (), row, reason)
        return Decision(self.mode, event, self._metrics(raw))

    def _switch(self, step: int, kind, to_mode: Mode, fired: tuple[Fired, ...], row: dict[str, float],
                reason: str) -> GuardEvent:
        values = dict(row)
        if self.start_entropy is not None:
            values["entropy/start"] = self.start_entropy
        if self.entropy_target is not None:
            values["entropy/target"] = self.entropy_target
        if self.start_clip is not None:
            values[f"{self.cfg.clip_key}/start"] = self.start_clip
        event = GuardEvent(step, kind, self.mode, to_mode, fired, values, reason)
        self.mode, self.on_policy_steps = to_mode, 0
        self.events.append(event)
        return event

    def _metrics(self, raw: list[Fired]) -> dict[str, float]:
        """Per-step guard metrics: mode flag (notebook spans), hold left, quiet streak, counts."""
        on = self.mode == "on_policy"
        firing = {f.rule for f in raw}
        out = {"guard/on_policy": float(on),
               "guard/hold_left": float(max(self.cfg.hold_steps - self.on_policy_steps, 0) if on else 0),
               "guard/quiet_steps": float(self.quiet_steps),
               "guard/fallbacks": float(sum(e.kind == "fallback" for e in self.events))}
        out |= {f"guard/rule/{name}": float(name in firing) for name in RULES}
        return out

    def summary(self) -> dict[str, Any]:
        """For the run summary: counts, current mode and every event."""
        return {"mode": self.mode, "fallbacks": sum(e.kind == "fallback" for e in self.events),
                "recoveries": sum(e.kind == "recover" for e in self.events),
                "events": [e.to_dict() for e in self.events]}

    def state_dict(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "mode": self.mode, "steps_seen": self.steps_seen,
                "on_policy_steps": self.on_policy_steps, "quiet_steps": self.quiet_steps,
                "start_samples": list(self.start_samples), "start_clip_samples": list(self.start_clip_samples),
                "history": [dict(r) for r in self.history],
                "events": [e.to_dict() for e in self.events]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        expected = {"version", "mode", "steps_seen", "on_policy_steps", "quiet_steps", "start_samples",
                    "history", "events"} | ({"start_clip_samples"} if state.get("version") != 1 else set())
        if set(state) != expected:
            raise ValueError(f"guard state needs {sorted(expected)}; got {sorted(state)}")
        if state["version"] not in (1, _STATE_VERSION) or state["mode"] not in ("off_policy", "on_policy"):
            raise ValueError(f"unknown guard state version {state['version']} / mode {state['mode']!r}")
        self.mode = state["mode"]
        self.steps_seen, self.on_policy_steps = int(state["steps_seen"]), int(state["on_policy_steps"])
        self.quiet_steps = int(state["quiet_steps"])
        self.start_samples = [float(v) for v in state["start_samples"]]
        self.start_clip_samples = [float(v) for v in state.get("start_clip_samples", ())]
        self.history = deque(({k: float(v) for k, v in r.items()} for r in state["history"]),
                             maxlen=self._window())
        self.events = [GuardEvent.from_dict(e) for e in state["events"]]
