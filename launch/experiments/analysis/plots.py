"""Plot panels of a run's metrics: one axis each, every function returns the points it drew.

Used by the monitoring notebook (live runs), ``launch.experiments.analysis.compare`` (runs side by side) and the
pass@k plot; a panel whose metric a run does not log yet says so instead of drawing nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable
from learner.step_path import CHAIN

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

STEP = "step"
# the learner-side entropy per step, and the probe's (temperature 1, fixed prompts) at each evaluation
ENTROPY_KEYS = ("entropy/mean", "probe/entropy")
REWARD_KEYS = ("reward/mean", "reward/accuracy")
EVAL_KEYS = ("eval/accuracy", "eval/avg@n")


def lag_hist(df: pd.DataFrame, key: str = "lag/hist") -> tuple[dict[int, float], dict[int, float]]:
    """(latest step's histogram, cumulative histogram over all steps), lag -> count."""
    if key not in df.columns:
        return {}, {}
    hists = [_int_keys(h) for h in df[key] if isinstance(h, (dict, list)) and h]
    total: Counter = Counter()
    for h in hists:
        total.update(h)
    return (hists[-1] if hists else {}), dict(total)


def _int_keys(h: dict | list) -> dict[int, float]:
    """{lag: n} with int or str keys (JSON makes them strings), or [n_at_lag0, n_at_lag1, ...]."""
    items = h.items() if isinstance(h, dict) else ((i, n) for i, n in enumerate(h) if n)
    out = {}
    for k, v in items:
        try:
            out[int(k)] = float(v)          # JSON turns the int keys into strings
        except (TypeError, ValueError):
            continue
    return out


# ---------------------------------------------------------------- plots (one axis each)
def no_data(ax: Axes, title: str, keys: Iterable[str]) -> int:
    ax.set_title(title, fontsize=9)
    ax.text(0.5, 0.5, "no data yet:\n" + "\n".join(keys), ha="center", va="center",
            transform=ax.transAxes, fontsize=8, color="gray")
    return 0


def draw_line(ax: Axes, df: pd.DataFrame, key: str, **style) -> int:
    """``key`` vs step (dashed with markers for the evaluation points' ``eval/*`` and ``probe/*``); returns the
    points drawn."""
    import pandas as pd

    if key not in df.columns:
        return 0
    s = df[[STEP, key]].apply(pd.to_numeric, errors="coerce").dropna()
    if s.empty:
        return 0
    is_eval = key.startswith(("eval/", "probe/"))
    style = {"linestyle": "--" if is_eval else "-", "marker": "o" if is_eval or len(s) == 1 else None,
             "markersize": 4, "label": key, **style}
    ax.plot(s[STEP], s[key], **style)
    return len(s)


def finish_panel(ax: Axes, title: str, drawn: int, keys: Iterable[str], size: int = 9) -> int:
    if not drawn:
        return no_data(ax, title, keys)
    ax.set_title(title, fontsize=size)
    ax.set_xlabel(STEP, fontsize=size - 1)
    ax.tick_params(labelsize=size - 2)
    ax.legend(fontsize=7)
    return drawn


def plot_series(ax: Axes, df: pd.DataFrame, keys: Iterable[str], title: str) -> int:
    """Each present key as a line vs step; returns the number of points drawn."""
    keys = list(keys)
    return finish_panel(ax, title, sum(draw_line(ax, df, key) for key in keys), keys)


def guard_spans(df: pd.DataFrame) -> list[tuple[float, float]]:
    """(first, last) step of each run of steps the lag guard held on-policy (``guard/on_policy`` 1)."""
    import pandas as pd

    if "guard/on_policy" not in df.columns:
        return []
    s = df[[STEP, "guard/on_policy"]].apply(pd.to_numeric, errors="coerce").dropna().sort_values(STEP)
    spans, start, prev = [], None, None
    for step, on in zip(s[STEP], s["guard/on_policy"]):
        if on >= 0.5 and start is None:
            start = step
        elif on < 0.5 and start is not None:
            spans.append((start, prev))
            start = None
        prev = step
    if start is not None:
        spans.append((start, prev))
    return spans


def shade_guard(ax: Axes, df: pd.DataFrame) -> int:
    """Shade the steps the guard held the run on-policy; returns how many spans."""
    spans = guard_spans(df)
    for i, (lo, hi) in enumerate(spans):
        ax.axvspan(lo - 0.5, hi + 0.5, color="tab:orange", alpha=0.15, label="guard: on-policy" if i == 0 else None)
    return len(spans)


def stage_starts(df: pd.DataFrame) -> list[float]:
    """Steps where a multi-stage run's ``stage`` moves up (a larger response budget starts)."""
    import pandas as pd

    if "stage" not in df.columns:
        return []
    s = df[[STEP, "stage"]].apply(pd.to_numeric, errors="coerce").dropna().sort_values(STEP)
    return [float(step) for step, prev, cur in zip(s[STEP][1:], s["stage"][:-1], s["stage"][1:]) if cur > prev]


def mark_stages(ax: Axes, df: pd.DataFrame) -> int:
    for i, step in enumerate(stage_starts(df)):
        ax.axvline(step - 0.5, color="gray", linestyle=":", linewidth=1, label="stage start" if i == 0 else None)
    return len(stage_starts(df))


def plot_entropy(ax: Axes, df: pd.DataFrame) -> int:
    """entropy/mean and the probe's entropy at each evaluation (left axis) and the entropy coefficient alpha
    (right axis) vs step, with the
    adaptive control's target; the steps the lag guard held the run on-policy are shaded and
    multi-stage boundaries marked."""
    import pandas as pd

    shade_guard(ax, df)
    mark_stages(ax, df)
    if "entropy/target" in df.columns:
        target = pd.to_numeric(df["entropy/target"], errors="coerce").dropna()
        if len(target):
            ax.axhline(float(target.iloc[-1]), color="tab:green", linestyle="--", linewidth=1, label="entropy target")
    n = plot_series(ax, df, ENTROPY_KEYS, "entropy")
    if n and "entropy/coef" in df.columns:
        twin = ax.twinx()
        coef = draw_line(twin, df, "entropy/coef", color="tab:red", linewidth=1)
        if coef:
            twin.tick_params(labelsize=7, colors="tab:red")
            twin.legend(fontsize=7, loc="lower right")
        n += coef
    return n


def plot_reward(ax: Axes, df: pd.DataFrame) -> int:
    return plot_series(ax, df, REWARD_KEYS + EVAL_KEYS, "reward / accuracy")


def plot_length(ax: Axes, df: pd.DataFrame) -> int:
    mark_stages(ax, df)
    return plot_series(ax, df, ("length/mean", "length/max"), "response length (tokens)")


def plot_lag(ax: Axes, df: pd.DataFrame) -> int:
    return plot_series(ax, df, ("lag/mean", "lag/max"), "policy lag")


def plot_clip(ax: Axes, df: pd.DataFrame) -> int:
    return plot_series(ax, df, ("clip/low_frac", "clip/high_frac"), "clipped token fraction")


def plot_trained_throughput(ax: Axes, df: pd.DataFrame) -> int:
    keys = sorted(c for c in df.columns if c.startswith("tokens/") and c.endswith("_per_s"))
    return plot_series(ax, df, keys or ["tokens/trained_per_s"], "learner tokens/s")


LAG_BUCKETS = ("0", "1", "2-3", "4-7", "8+")     # learner.lag.LAG_BUCKETS' labels (update lag)
_BUCKET_STYLES = ("-", "--")


def plot_lag_buckets(ax: Axes, df: pd.DataFrame, metrics: Iterable[str], title: str) -> int:
    """``lagbucket/<bucket>/<metric>`` vs step: one colour per bucket of update lag, one line style per
    metric (solid, dashed); returns the points drawn."""
    import matplotlib.pyplot as plt

    metrics = list(metrics)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    for i, bucket in enumerate(LAG_BUCKETS):
        for metric, style in zip(metrics, _BUCKET_STYLES):
            label = f"lag {bucket}" + (f" {metric.rsplit('/', 1)[-1]}" if len(metrics) > 1 else "")
            drawn += draw_line(ax, df, f"lagbucket/{bucket}/{metric}", color=colours[i % len(colours)],
                                linestyle=style, label=label)
    return finish_panel(ax, title, drawn, [f"lagbucket/<lag>/{m}" for m in metrics])


def plot_lag_hist(ax: Axes, df: pd.DataFrame) -> int:
    """Lag histogram of the latest step and cumulative over the run (fractions, side by side)."""
    latest, total = lag_hist(df)
    if not total:
        return no_data(ax, "lag histogram", ["lag/hist"])
    width = 0.4
    for offset, hist, name in ((-width / 2, latest, "latest step"), (width / 2, total, "cumulative")):
        mass = sum(hist.values()) or 1.0
        lags = sorted(hist)
        ax.bar([lag + offset for lag in lags], [hist[lag] / mass for lag in lags], width=width, label=name)
    ax.set_title("lag histogram", fontsize=9)
    ax.set_xlabel("lag (versions)", fontsize=8)
    ax.set_ylabel("fraction", fontsize=8)
    ax.set_xticks(sorted(total))
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    return len(total)


def plot_step_path(ax: Axes, df: pd.DataFrame) -> int:
    """Stacked bar per step: its critical path (``path/seg/<hop>``, ``learner.step_path``) from the
    publish of the version its prompts needed to training done, one colour per hop; returns the bars."""
    import pandas as pd


    keys = [f"path/seg/{segment}" for segment, _ in CHAIN]
    present = [k for k in keys if k in df.columns]
    if not present:
        return no_data(ax, "step critical path (s)", ["path/seg/<hop>"])
    s = df[[STEP, *present]].apply(pd.to_numeric, errors="coerce").dropna(subset=[STEP])
    s = s[s[present].notna().any(axis=1)]
    if s.empty:
        return no_data(ax, "step critical path (s)", ["path/seg/<hop>"])
    bottom = pd.Series(0.0, index=s.index)
    for key in present:
        height = s[key].fillna(0.0).clip(lower=0.0)
        ax.bar(s[STEP], height, bottom=bottom, width=0.8, label=key.rsplit("/", 1)[-1])
        bottom += height
    ax.set_title("step critical path (s)", fontsize=9)
    ax.set_xlabel(STEP, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, ncol=2)
    return len(s)


def plot_actor_throughput(ax: Axes, actors: dict[str, dict[str, Any]], now: float | None = None) -> int:
    """Bar per actor: generated tokens/s from its last heartbeat, labelled with version and age."""
    import time

    items = sorted((str(a), s) for a, s in (actors or {}).items() if isinstance(s, dict))
    bars = [(a, float(s["tokens_per_s"]), s) for a, s in items if is_finite(s.get("tokens_per_s"))]
    if not bars:
        return no_data(ax, "actor tokens/s", ["actors: tokens_per_s"])
    now = time.time() if now is None else now
    names = []
    for a, _, s in bars:
        age_s = float(s["age_s"]) if is_finite(s.get("age_s")) else \
            now - float(s["time"]) if is_finite(s.get("time")) else None
        age = f", {age_s:.0f}s ago" if age_s is not None else ""
        err = " ERR" if s.get("last_error") else ""
        names.append(f"{a}\nv{s.get('version', '?')}{age}{err}")
    ax.bar(range(len(bars)), [b[1] for b in bars], color="tab:green")
    ax.set_xticks(range(len(bars)), names, fontsize=7)
    ax.set_title("actor tokens/s (heartbeats)", fontsize=9)
    ax.tick_params(labelsize=7)
    return len(bars)


def is_finite(v: Any) -> bool:
    try:
        return v is not None and not isinstance(v, bool) and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False
