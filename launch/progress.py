"""One readable progress line per learner step: step, version, reward, entropy, lag, throughput, ETA."""

from __future__ import annotations

import time


class Progress:
    def __init__(self, total_steps: int, start_step: int = 0):
        self.total, self.start_step, self.t0 = total_steps, start_step, time.monotonic()

    def line(self, m: dict, gen_tokens_per_s: float = 0.0) -> str:
        step = int(m.get("step", 0)) + 1
        done = max(step - self.start_step, 1)
        per_step = (time.monotonic() - self.t0) / done
        eta = per_step * max(self.total - step, 0)
        return (f"[run] step {step}/{self.total} v{m.get('version', '?')} "
                f"reward {m.get('reward/mean', float('nan')):.3f} acc {m.get('reward/accuracy', float('nan')):.3f} "
                f"entropy {m.get('entropy/mean', float('nan')):.3f} (α {m.get('entropy/coef', 0.0):.1e}) "
                f"lag mean/max {m.get('lag/mean', 0.0):.2f}/{m.get('lag/max', 0)} "
                f"gen {gen_tokens_per_s:.0f} tok/s train {m.get('tokens/trained_per_s', 0.0):.0f} tok/s "
                f"| {per_step:.1f}s/step ETA {eta / 60:.1f} min")
