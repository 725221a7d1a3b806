"""pass@k curves of evaluated checkpoints: pass@k vs k on a log2 axis, one curve per checkpoint.

The evaluator writes ``eval/pass@{k}`` for k = 1, 2, 4, ..., n in each evaluation row
(``launch.run.evaluation``, ``rewards.evaluate.curve_ks``); every such row of a run's metrics frame
(``launch.experiments.analysis.compare.metrics_frame``) is one checkpoint and one curve. ``python -m launch.experiments.analysis.compare``
writes the figure as ``pass_at_k.png`` beside ``compare.png``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from launch.experiments.analysis.plots import STEP, is_finite, no_data

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

PASS_AT_K_KEY = re.compile(r"^eval/pass@(\d+)$")


def pass_at_k_curves(df: pd.DataFrame) -> list[tuple[float, dict[int, float]]]:
    """``(step, {k: pass@k})`` for every row that holds ``eval/pass@{k}`` values, in row order
    (frames are sorted by step); a row without a step gets NaN."""
    cols = {int(m.group(1)): c for c in df.columns if (m := PASS_AT_K_KEY.match(str(c)))}
    curves = []
    for _, row in df.iterrows():
        points = {k: float(row[c]) for k, c in sorted(cols.items()) if is_finite(row[c])}
        if points:
            curves.append((float(row[STEP]) if is_finite(row.get(STEP)) else math.nan, points))
    return curves


def plot_pass_at_k(ax: Axes, frames: dict[str, pd.DataFrame]) -> int:
    """One curve per evaluated checkpoint: a colour per run, later checkpoints more opaque.
    Returns the number of curves drawn (0 and a "no data" note when there is none)."""
    drawn, ks = 0, set()
    for i, (run, df) in enumerate(frames.items()):
        curves = pass_at_k_curves(df)
        for j, (step, points) in enumerate(curves):
            at = f"step {step:g}" if math.isfinite(step) else "eval"
            ax.plot(list(points), list(points.values()), marker="o", markersize=3, color=f"C{i % 10}",
                    alpha=0.35 + 0.65 * (j + 1) / len(curves), label=f"{run} @ {at}")
            ks.update(points)
            drawn += 1
    if not drawn:
        return no_data(ax, "pass@k", ["eval/pass@1", "eval/pass@2", "..."])
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ks), [str(k) for k in sorted(ks)])
    ax.set_ylim(0, 1.02)
    ax.set_title("pass@k per checkpoint", fontsize=10)
    ax.set_xlabel("k (log2)", fontsize=9)
    ax.set_ylabel("pass@k", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6)
    return drawn


def write_pass_at_k(frames: dict[str, pd.DataFrame], out_dir: str | Path) -> Path | None:
    """``out_dir/pass_at_k.png`` when any run logged a pass@k curve; None (nothing written) if not."""
    import matplotlib.pyplot as plt

    if not any(pass_at_k_curves(df) for df in frames.values()):
        return None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    plot_pass_at_k(ax, frames)
    fig.tight_layout()
    path = out_dir / "pass_at_k.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
