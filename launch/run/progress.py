"""The one console line per learner step: step i/N, the step's metrics, generation rate, ETA."""

from __future__ import annotations

import time

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
