"""Per-step metrics of the learner (DESIGN.md §6): rollout statistics and the readable line.

Names are namespaced ``section/name``; how per-update loss metrics become step values is
``learner.reduce``'s rule.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from buffer.messages import Group


def rollout_stats(groups: Sequence[Group], present: Sequence[np.ndarray]) -> dict[str, float]:
    """Reward, accuracy, length, truncation and generated tokens over the responses read this step (not stale).

    Computed over every non-stale group read (trained and zero-advantage ones alike), so
    dynamic sampling does not bias the reward curve. Accuracy = fraction with reward >= 1
    (correct under both 0/1 and ±1 reward scales). ``length/uncut_mean`` leaves out the responses the
    budget cut (NaN when it cut them all): a raised budget lengthens cut responses by itself, so only
    the uncut ones show whether the policy learned to write longer. ``tokens/generated``: their lengths
    summed, what generating them cost.
    """
    resp = [r for g, keep in zip(groups, present) for r, k in zip(g.responses, keep) if k]
    stage = {"stage": float(max((g.stage for g in groups), default=0))}   # multi-stage context schedule
    if not resp:
        return {"reward/mean": float("nan"), "reward/accuracy": float("nan"), "length/mean": float("nan"),
                "length/max": 0.0, "length/uncut_mean": float("nan"), "truncation/rate": float("nan"),
                "tokens/generated": 0.0, **stage}
    rewards = np.array([r.reward for r in resp], dtype=np.float64)
    lengths = np.array([r.length for r in resp], dtype=np.float64)
    uncut = lengths[[not r.truncated for r in resp]]
    return {
        "reward/mean": float(rewards.mean()), "reward/accuracy": float((rewards >= 1.0 - 1e-9).mean()),
        "length/mean": float(lengths.mean()), "length/max": float(lengths.max()),
        "length/uncut_mean": float(uncut.mean()) if len(uncut) else float("nan"),
        "truncation/rate": float(np.mean([r.truncated for r in resp])), "tokens/generated": float(lengths.sum()),
        **stage,
    }


def summary_line(m: dict) -> str:
    """The readable form of one step's metrics row (the caller adds its own prefix)."""
    def f(key: str, fmt: str = ".3f") -> str:
        v = m.get(key)
        return "-" if v is None else format(v, fmt)

    kl = f" kl {f('kl/mean', '.2e')}" if "kl/mean" in m else ""
    prm = (f" | prm acc {f('prm/accuracy')} pair {f('prm/pairwise_accuracy')} loss {f('prm/loss')} "
           f"filtered {f('prompts/filtered_frac', '.2f')}") if "prm/loss" in m else ""
    return (f"v{m['version']} {m['mode']} | reward {f('reward/mean')} acc {f('reward/accuracy')} "
            f"len {f('length/mean', '.1f')}/{f('length/max', '.0f')} trunc {f('truncation/rate', '.2f')} | "
            f"ent {f('entropy/mean')} coef {f('entropy/coef', '.1e')}{kl} | lag {f('lag/mean', '.2f')}/"
            f"{f('lag/max', '.0f')} stale {f('lag/stale_dropped', '.0f')} zero-adv {f('groups/zero_adv_dropped', '.0f')} "
            f"| clip {f('clip/low_frac', '.3f')}/{f('clip/high_frac', '.3f')} ratio {f('ratio/mean')}/"
            f"{f('ratio/max', '.2f')} gnorm {f('grad/norm')} lr {f('lr', '.1e')} | train "
            f"{f('tokens/trained_per_s', '.0f')} tok/s wait {f('time/wait_data', '.2f')}s train "
            f"{f('time/train', '.2f')}s sync {f('time/weight_sync', '.2f')}s{prm}")
