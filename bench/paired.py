"""How every component benchmark states its figure: the median of paired rounds, the spread, the target.

A round times our path and the bare library on the same work back to back (interleaved, so load
from other processes hits both alike) and gives one ratio ours/bare; the figure is the median
over the rounds, printed with its spread (min-max) and the target beside it (issue 32: >= 0.95
as the median of 5 paired rounds). Nothing here asserts: a benchmark reports, it does not judge.
"""

from __future__ import annotations

import statistics

ROUNDS = 5            # paired rounds per figure, by default
TARGET = 0.95         # ours / bare, each component against its bare library


def ratio_line(what: str, ratios: list[float], target: float = TARGET) -> str:
    """``'ratio actor/bare: median 0.93 (spread 0.90-0.95) over 5 paired rounds -> target >= 0.95: BELOW'``."""
    med = statistics.median(ratios)
    verdict = "meets" if med >= target else "BELOW"
    return (f"ratio {what}: median {med:.3f} (spread {min(ratios):.3f}-{max(ratios):.3f}) over {len(ratios)} "
            f"paired round(s); per round {', '.join(f'{r:.3f}' for r in ratios)} -> target >= {target:.2f}: {verdict}")
