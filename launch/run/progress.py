"""The console's progress: where start-up went (StartupClock), then one line per learner step: step
i/N, the step's metrics, generation rate, ETA (Progress)."""

from __future__ import annotations

import time

from buffer.monitor import Monitor
from learner.step_metrics import summary_line


class Progress:
    """``deadline`` (a time.monotonic() value, from ``max_wall_s``) caps the ETA: a soak asks for
    100000 steps and stops on its wall clock."""

    def __init__(self, total_steps: int, start_step: int = 0, deadline: float | None = None):
        self.total, self.start_step, self.t0 = total_steps, start_step, time.monotonic()
        self.deadline = deadline

    def line(self, m: dict, gen_tokens_per_s: float = 0.0) -> str:
        now, step = time.monotonic(), int(m.get("step", 0)) + 1
        per_step = (now - self.t0) / max(step - self.start_step, 1)
        eta = per_step * max(self.total - step, 0)
        if self.deadline is not None:
            eta = min(eta, max(self.deadline - now, 0.0))
        return (f"[step {step}/{self.total}] {summary_line(m)} | gen {gen_tokens_per_s:.0f} tok/s "
                f"| {per_step:.1f}s/step ETA {eta / 60:.1f} min")


class StartupClock:
    """Seconds of each start-up phase, from ``started`` (a time.monotonic() value) to the first step:
    a short run's start-up is a large part of it (a 20-step science run: about a third)."""

    def __init__(self, started: float):
        self.phases: dict[str, float] = {}
        self._last = started
        self._started = started

    def mark(self, phase: str) -> None:
        """``phase`` ended now: it took the time since the previous mark."""
        now = time.monotonic()
        self.phases[phase] = round(now - self._last, 2)
        self._last = now

    def line(self) -> str:
        total = self._last - self._started
        return f"[driver] started in {total:.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items())


def actors_tokens_per_s(buffer) -> float:
    """The generation rate of all the run's actors together (their heartbeats in the buffer)."""
    return sum(float(a.get("tokens_per_s", 0.0)) for a in Monitor(buffer.client, buffer.run_id).actors().values())
