"""Per-step metrics of the learner (DESIGN.md §6): rollout stats, update aggregation, stdout line.

Names are namespaced ``section/name``. Per-update loss metrics arrive as sums divided by that
update's global token count T_u (``learner.loss`` convention); a step value is the token-
weighted mean over the step's updates, sum_u value_u T_u / sum_u T_u, except ``/max`` and
``/min`` keys (max / min) and counts (summed).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from buffer.schema import Group
from learner.lag import LagReport

_COUNT_KEYS = {"tokens/count"}


def rollout_stats(groups: Sequence[Group], present: Sequence[np.ndarray]) -> dict[str, float]:
    """Reward, accuracy, length and truncation over the responses read this step (not stale).

    Computed over every non-stale group read (trained and zero-advantage ones alike), so
    dynamic sampling does not bias the reward curve. Accuracy = fraction with reward >= 1
    (correct under both 0/1 and ±1 reward scales).
    """
    resp = [r for g, keep in zip(groups, present) for r, k in zip(g.responses, keep) if k]
    if not resp:
        return {"reward/mean": float("nan"), "reward/accuracy": float("nan"), "length/mean": float("nan"),
                "length/max": 0.0, "truncation/rate": float("nan")}
    rewards = np.array([r.reward for r in resp], dtype=np.float64)
    lengths = np.array([r.length for r in resp], dtype=np.float64)
    return {
        "reward/mean": float(rewards.mean()), "reward/accuracy": float((rewards >= 1.0 - 1e-9).mean()),
        "length/mean": float(lengths.mean()), "length/max": float(lengths.max()),
        "truncation/rate": float(np.mean([r.truncated for r in resp])),
    }


def combine_updates(per_update: Sequence[dict[str, float]], tokens: Sequence[float]) -> dict[str, float]:
    """Token-weighted mean of per-update loss metrics (max/min for /max, /min; sums for counts)."""
    total = float(sum(tokens))
    out: dict[str, float] = {}
    keys = sorted({k for m in per_update for k in m})
    for k in keys:
        vals = [(m[k], t) for m, t in zip(per_update, tokens) if k in m]
        if k.endswith("/max"):
            out[k] = max(v for v, _ in vals)
        elif k.endswith("/min"):
            out[k] = min(v for v, _ in vals)
        elif k in _COUNT_KEYS:
            out[k] = sum(v for v, _ in vals)
        else:
            out[k] = sum(v * t for v, t in vals) / total if total > 0 else 0.0
    return out


def lag_metrics(report: LagReport, stale_dropped: int) -> dict:
    """Lag histogram over the step's updates (keys are strings: msgpack maps need str keys)."""
    return {"lag/hist": {str(k): int(n) for k, n in sorted(report.sample_hist.items())},
            "lag/token_hist": {str(k): int(n) for k, n in sorted(report.token_hist.items())},
            "lag/mean": report.mean, "lag/token_mean": report.token_mean, "lag/max": float(report.max),
            "lag/straddled": float(report.straddled), "lag/stale_dropped": float(stale_dropped)}


def summary_line(m: dict) -> str:
    """One readable line per step for stdout."""
    def f(key: str, fmt: str = ".3f") -> str:
        v = m.get(key)
        return "-" if v is None else format(v, fmt)

    kl = f" kl {f('kl/mean', '.2e')}" if "kl/mean" in m else ""
    return (f"[learner] step {m['step']} v{m['version']} {m['mode']} | reward {f('reward/mean')} "
            f"acc {f('reward/accuracy')} len {f('length/mean', '.1f')}/{f('length/max', '.0f')} "
            f"trunc {f('truncation/rate', '.2f')} | ent {f('entropy/mean')} coef {f('entropy/coef', '.1e')}"
            f"{kl} | lag {f('lag/mean', '.2f')}/{f('lag/max', '.0f')} stale {f('lag/stale_dropped', '.0f')} "
            f"zero-adv {f('groups/zero_adv_dropped', '.0f')} | clip {f('clip/low_frac', '.3f')}/"
            f"{f('clip/high_frac', '.3f')} ratio {f('ratio/mean')}/{f('ratio/max', '.2f')} "
            f"gnorm {f('grad/norm')} lr {f('lr', '.1e')} | {f('tokens/trained_per_s', '.0f')} tok/s "
            f"wait {f('time/wait_data', '.2f')}s train {f('time/train', '.2f')}s sync {f('time/weight_sync', '.2f')}s")
