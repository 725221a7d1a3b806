"""The lag guard's rules: pure functions of the per-step metrics history (issue 22).

Each rule reads the rows the learner already writes once per learner step (``entropy/mean``,
``mismatch/behaviour_kl_k3`` or ``mismatch/start_kl_k3``, ``clip/frac`` / ``clip/high_frac`` /
``clip/low_frac``; ``learner.step_metrics``, ``learner.lag.ratio_stats``,
``learner.corrections``), oldest first, and answers ``Fired`` (which rule, the values that fired
it, the thresholds) or None:

    rule(history: Sequence[Mapping[str, float]], cfg: GuardConfig, base: Baseline, persist=None)

``Baseline`` carries the two reference levels the history alone cannot give once it is a
bounded window: the run's starting entropy and the adaptive entropy target. A missing or
non-finite value is no evidence: a rule without the numbers it needs stays quiet.

Rules and defaults (``GuardConfig``; set a threshold to None to turn its rule off):

* ``entropy_floor``: entropy/mean below the highest configured floor on each of the last
  ``persist_steps`` steps. Floors: absolute (off by default: the scale is model-dependent);
  0.2 x the starting entropy; 0.5 x the entropy target. Skywork-OR1 (He et al. 2025,
  arXiv:2505.22312, "entropy collapse" section) describes premature collapse as entropy falling
  quickly from its start towards 0, and builds its adaptive control to hold entropy at
  tgt = 0.2: a run at half that target, or with less than a fifth of the entropy it started
  with, has lost what the controller is there to keep. The two fractions are our judgment, not
  numbers read off the paper's curves.
* ``entropy_slope``: least-squares slope of entropy/mean over the last ``slope_window`` = 20
  steps below -1% of the starting entropy per step (on that trend it reaches 0 within 100
  steps). Healthy on-policy runs drift down over thousands of steps, collapsing off-policy ones
  within a few hundred (Skywork-OR1's off-policy ablations): 1%/step sits between. With 20 points
  the slope's noise is ~0.04 x the per-step noise, so a few % of step-to-step jitter stays
  several standard deviations inside the threshold. Also a judgment call.
* ``mismatch_kl``: k3 mismatch KL between behaviour and learner above 0.02 on each of the last
  ``persist_steps`` steps. Anchors: k3 of a token whose ratio sits at the clip edge 1.2 is
  0.2 - ln 1.2 = 0.018, i.e. the mean token is as off-policy as the trust region allows;
  prime-rl asks a new model implementation for a mean mismatch KL < 0.015 (docs/development.md)
  and names a sustained, growing mismatch KL as the early sign of off-policy collapse
  (docs/training.md).
* ``clip_frac``: fraction of clipped tokens above max(0.05, 2 x the run's starting clip
  fraction) on each of the last ``persist_steps`` steps; quiet until the starting level is
  known (the first ``start_steps`` steps). A run's clip fraction is set first by how off-policy
  it is by design: 16 updates per rollout batch (reuse-4) clip 5-6% of tokens from the first
  steps while entropy is healthy, one update per batch well under 1%. What Skywork-OR1 ties to
  collapse is the clip fraction *rising* as the policy sharpens and its updates move the ratios
  further, so the rule compares the run with its own start (as the entropy floor does); 0.05,
  a twentieth of the batch without gradient, is the least it fires at. The factor 2 is a
  judgment call: within one run, step-to-step clip fractions vary by a few tenths of their level.

In strict on-policy mode (the guard's fallback) the learner trains every sample at lag 0 with
one update per batch, so the mismatch and clip rules are nearly always quiet there by
construction: recovery is effectively gated by the entropy rules, the signal that matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from learner.config import GuardConfig

ENTROPY_KEY = "entropy/mean"


@dataclass(frozen=True)
class Baseline:
    """Reference levels: the run's starting entropy and clip fraction (None until known) and the
    entropy target."""

    start_entropy: float | None = None
    entropy_target: float | None = None
    start_clip: float | None = None


@dataclass(frozen=True)
class Fired:
    """One rule firing: its name, the values that fired it, the thresholds they crossed."""

    rule: str
    values: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "values": dict(self.values), "thresholds": dict(self.thresholds),
                "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Fired:
        return cls(str(d["rule"]), {k: float(v) for k, v in d["values"].items()},
                   {k: float(v) for k, v in d["thresholds"].items()}, str(d["message"]))


Rule = Callable[..., "Fired | None"]


def value(row: Mapping[str, Any], key: str) -> float | None:
    """row[key] as a float, or None when missing or not finite."""
    v = row.get(key)
    if v is None or isinstance(v, (dict, list, str)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def least_squares_slope(ys: Sequence[float]) -> float:
    """Slope per step of the least-squares line through (0, y_0), ..., (n-1, y_{n-1}); n >= 2."""
    n = len(ys)
    if n < 2:
        raise ValueError("a slope needs at least 2 points")
    x_mean, y_mean = (n - 1) / 2, math.fsum(ys) / n
    num = math.fsum((i - x_mean) * (y - y_mean) for i, y in enumerate(ys))
    den = math.fsum((i - x_mean) ** 2 for i in range(n))
    return num / den


def _last(history: Sequence[Mapping[str, Any]], key: str, n: int) -> list[float] | None:
    """The last n values of key, or None when fewer than n rows or any is missing / not finite."""
    if n < 1 or len(history) < n:
        return None
    vals = [value(row, key) for row in history[-n:]]
    return None if any(v is None for v in vals) else vals   # type: ignore[return-value]


def entropy_floors(cfg: GuardConfig, base: Baseline) -> dict[str, float]:
    """Every configured floor that can be computed: absolute, from the start, from the target."""
    floors = {}
    if cfg.entropy_floor is not None:
        floors["entropy_floor"] = cfg.entropy_floor
    if cfg.entropy_floor_start_frac is not None and base.start_entropy is not None:
        floors["start_floor"] = cfg.entropy_floor_start_frac * base.start_entropy
    if cfg.entropy_floor_target_frac is not None and base.entropy_target is not None:
        floors["target_floor"] = cfg.entropy_floor_target_frac * base.entropy_target
    return floors


def entropy_floor_rule(history, cfg: GuardConfig, base: Baseline, persist: int | None = None) -> Fired | None:
    """entropy/mean < the highest floor on each of the last ``persist`` steps (strict <)."""
    floors = entropy_floors(cfg, base)
    vals = _last(history, ENTROPY_KEY, persist or cfg.persist_steps)
    if not floors or vals is None:
        return None
    name, floor = max(floors.items(), key=lambda kv: kv[1])
    if not all(v < floor for v in vals):
        return None
    ctx = {k: v for k, v in (("entropy/start", base.start_entropy), ("entropy/target", base.entropy_target))
           if v is not None}
    return Fired("entropy_floor", {ENTROPY_KEY: vals[-1], **ctx}, floors,
                 f"entropy/mean {vals[-1]:.4g} < {name} {floor:.4g} for {len(vals)} step(s)")


def entropy_slope_rule(history, cfg: GuardConfig, base: Baseline, persist: int | None = None) -> Fired | None:
    """Least-squares slope of entropy/mean over the window < -slope_max_drop_frac x start (strict <)."""
    if cfg.slope_max_drop_frac is None or base.start_entropy is None:
        return None
    vals = _last(history, ENTROPY_KEY, cfg.slope_window)
    if vals is None:
        return None
    slope, limit = least_squares_slope(vals), -cfg.slope_max_drop_frac * base.start_entropy
    if not slope < limit:
        return None
    values = {"entropy/slope": slope, ENTROPY_KEY: vals[-1], "entropy/start": base.start_entropy}
    return Fired("entropy_slope", values, {"slope_min": limit, "slope_window": float(cfg.slope_window)},
                 f"entropy slope {slope:.4g}/step over {len(vals)} steps < {limit:.4g} "
                 f"(-{cfg.slope_max_drop_frac:g} x start {base.start_entropy:.4g})")


def _level_above(history, key: str, limit: float | None, persist: int, rule: str) -> Fired | None:
    if limit is None:
        return None
    vals = _last(history, key, persist)
    if vals is None or not all(v > limit for v in vals):
        return None
    return Fired(rule, {key: vals[-1]}, {key: limit},
                 f"{key} {vals[-1]:.4g} > {limit:.4g} for {len(vals)} step(s)")


def mismatch_kl_rule(history, cfg: GuardConfig, base: Baseline, persist: int | None = None) -> Fired | None:
    """Mismatch KL (first of ``cfg.mismatch_keys`` in the latest row) > mismatch_kl_max (strict >)."""
    if not history:
        return None
    key = next((k for k in cfg.mismatch_keys if value(history[-1], k) is not None), None)
    if key is None:
        return None
    return _level_above(history, key, cfg.mismatch_kl_max, persist or cfg.persist_steps, "mismatch_kl")


def clip_limit(cfg: GuardConfig, base: Baseline) -> float | None:
    """max(clip_frac_max, clip_frac_growth x the starting clip fraction); None while either rule
    part that is on still lacks its number (the growth part before the start is known)."""
    if cfg.clip_frac_max is None:
        return None
    if cfg.clip_frac_growth is None:
        return cfg.clip_frac_max
    if base.start_clip is None:
        return None
    return max(cfg.clip_frac_max, cfg.clip_frac_growth * base.start_clip)


def clip_frac_rule(history, cfg: GuardConfig, base: Baseline, persist: int | None = None) -> Fired | None:
    """Clip fraction (``cfg.clip_key``) > clip_limit (strict >)."""
    fired = _level_above(history, cfg.clip_key, clip_limit(cfg, base), persist or cfg.persist_steps, "clip_frac")
    if fired is None or base.start_clip is None:
        return fired
    return Fired(fired.rule, {**fired.values, f"{cfg.clip_key}/start": base.start_clip}, fired.thresholds,
                 f"{fired.message} (start {base.start_clip:.4g})")


RULES: dict[str, Rule] = {
    "entropy_floor": entropy_floor_rule, "entropy_slope": entropy_slope_rule,
    "mismatch_kl": mismatch_kl_rule, "clip_frac": clip_frac_rule,
}


def evaluate(history: Sequence[Mapping[str, Any]], cfg: GuardConfig, base: Baseline,
             persist: int | None = None) -> list[Fired]:
    """Every rule that fires on this history, in RULES order (``persist`` overrides cfg's)."""
    return [f for rule in RULES.values() if (f := rule(history, cfg, base, persist)) is not None]
