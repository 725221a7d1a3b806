"""How many prompts a step gets beyond D_R up front, for the groups dynamic sampling will reject.

A step of strict on-policy training needs D_R groups with a non-zero advantage. Each rejected group
is replaced the moment the learner reads it (``launch.run.feeder``), but the replacement is
generated after the rest of the batch: a second generation round on the step's critical path
(``bench/step_path.py``: the largest share of a tiny on-policy step). Issuing a few extra prompts
with the batch removes that round whenever the rejections do not outnumber them. The price is a
surplus when they do not all get rejected: in strict on-policy mode those groups come back too
late for any step (stale, generated for nothing). So the extra count is the largest one whose
*expected* surplus stays within a waste budget, with the rejections L ~ Binomial(D_R + e, p) at
the rejection rate p measured on recent steps:

    e* = max { e : E[max(e - L, 0)] <= budget * (D_R + e) }

e.g. budget 0.5%: D_R 16, p 0.15: e* = 1 (expected surplus 0.063 groups of 17); p 0.3: e* = 3.
"""

from __future__ import annotations

import math


def expected_surplus(extra: int, issued: int, p: float) -> float:
    """E[max(extra - L, 0)] for L ~ Binomial(issued, p): the extras no rejection used up."""
    return sum((extra - k) * math.comb(issued, k) * p ** k * (1.0 - p) ** (issued - k)
               for k in range(min(extra, issued) + 1))


def extra_prompts(rollout_batch: int, reject_rate: float, waste_budget: float) -> int:
    """The largest e with an expected surplus within ``waste_budget`` of the step's D_R + e prompts."""
    if waste_budget <= 0.0 or reject_rate <= 0.0:
        return 0
    p = min(reject_rate, 0.99)
    best = 0
    for e in range(1, rollout_batch + 1):          # never more than D_R extra prompts, whatever p says
        if expected_surplus(e, rollout_batch + e, p) > waste_budget * (rollout_batch + e):
            break                  # the surplus grows with e: no larger e fits either
        best = e
    return best


class RejectRate:
    """The fraction of a step's groups dynamic sampling rejected, over the last ``window`` steps."""

    def __init__(self, window: int = 8):
        self.window = window
        self.steps: dict[int, tuple[int, int]] = {}      # step -> (groups read for it, rejected)

    def record(self, step: int, used: int, lost: int) -> None:
        """A finished step: ``used`` groups trained, ``lost`` rejected."""
        self.steps[step] = (used + lost, lost)
        for old in sorted(self.steps)[:-self.window]:
            del self.steps[old]

    @property
    def rate(self) -> float:
        read = sum(n for n, _ in self.steps.values())
        return sum(lost for _, lost in self.steps.values()) / read if read else 0.0
