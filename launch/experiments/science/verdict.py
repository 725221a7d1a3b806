"""From runs to verdicts: one statistic per run, paired differences across seeds, agree / disagree / inconclusive.

Pure functions of metrics rows (``metrics.jsonl``), testable without a run. A check compares arm
B with arm A on one statistic; seeds pair the runs (seed s of A with seed s of B), so what varies
with the seed (prompt order, sampling) cancels in the difference d_s = stat(B, s) - stat(A, s).
The effect is mean(d) with its spread sd(d) across seeds; the verdict asks whether a two-sided
95% t-interval of the mean difference (half-width t_0.975(n-1) sd(d)/sqrt(n), printed beside every
verdict) excludes 0:

    agrees        the interval lies on the expected side of 0
    disagrees     it lies on the other side
    inconclusive  it contains 0 (or fewer than 2 seeds)

Two more expectations: ``differ`` (either side: agrees when the interval excludes 0, never disagrees;
for a question the paper does not answer) and ``not_lower`` (non-inferiority: agrees when the interval
lies above -NON_INFERIORITY_MARGIN, disagrees when it lies below it; its p-value tests that bound).

A dose-response check (lag k = 0, 1, 2, 4, 8) fits, per seed, the least-squares slope of the statistic
against the dose over that seed's runs, and judges the slopes like paired differences (the seed's
prompt order and sampling are shared by its doses, so they cancel in its slope): ``judge_slope``; against
a reference curve (the same doses under plain PPO) it judges the seed's slope minus the reference's.

A finding that does not reproduce is reported as measured: nothing here is tuned per finding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import numpy as np
from launch.worlds.routes.entropy_sources import decision_entropy

Rows = Sequence[dict]
# two-sided 95% quantiles of Student's t by degrees of freedom (seeds - 1)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
       20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
       29: 2.045, 30: 2.042}
WINDOW = 0.2            # first / last fraction of a run's steps a statistic averages over


def _series(rows: Rows, key: str) -> np.ndarray:
    """``key`` per step, in step order, NaN where a row lacks it."""
    ordered = sorted(rows, key=lambda r: r["step"])
    return np.array([float(r[key]) if isinstance(r.get(key), (int, float)) else np.nan for r in ordered])


def _window_mean(values: np.ndarray, where: Literal["first", "last"]) -> float:
    values = values[np.isfinite(values)]
    if not len(values):
        return math.nan
    k = max(1, int(round(len(values) * WINDOW)))
    return float(np.mean(values[:k] if where == "first" else values[-k:]))


def _growth(values: np.ndarray) -> float:
    """The mean of the last 20% of steps minus that of the first 20%."""
    return _window_mean(values, "last") - _window_mean(values, "first")


def entropy_ratio(rows: Rows) -> float:
    """Mean entropy of the last 20% of steps over that of the first 20%: how much of its entropy a
    run kept (< 1: it fell). A ratio, so runs that start at different levels (temperature 0.6 vs
    1.0) compare by how fast they collapse, not by where they start."""
    e = _series(rows, "entropy/mean")
    return _window_mean(e, "last") / _window_mean(e, "first")


def entropy_final(rows: Rows) -> float:
    return _window_mean(_series(rows, "entropy/mean"), "last")


def entropy_target_gap(rows: Rows, reference: Rows = ()) -> float:
    """|final entropy - the adaptive control's target|. A run without a target of its own (no
    entropy term, a fixed coefficient) is measured against the target of ``reference``, the run it
    is compared with; NaN when neither has one."""
    target = _window_mean(_series(rows, "entropy/target"), "last")
    if not math.isfinite(target) and reference:
        target = _window_mean(_series(reference, "entropy/target"), "last")
    return abs(entropy_final(rows) - target)


def _probe_series(rows: Rows) -> np.ndarray:
    """``probe/entropy`` at each evaluation point, in step order (launch.run.probe)."""
    return _series([r for r in rows if isinstance(r.get("probe/entropy"), (int, float))], "probe/entropy")


def probe_entropy_ratio(rows: Rows) -> float:
    """The probe's entropy (the policy's own, temperature 1, on fixed held-out prompts: launch.run.probe) at
    the last evaluation point over that at the first: how much of its entropy the policy kept, measured
    the same way in every arm (the learner-side ``entropy_ratio`` is taken at the sampling temperature on
    the tokens each arm trains). NaN with fewer than two evaluation points."""
    e = _probe_series(rows)
    e = e[np.isfinite(e)]
    return float(e[-1] / e[0]) if len(e) >= 2 and e[0] > 0 else math.nan


def probe_entropy_final(rows: Rows) -> float:
    """The probe's entropy at the last evaluation point (nats per token, temperature 1)."""
    e = _probe_series(rows)
    e = e[np.isfinite(e)]
    return float(e[-1]) if len(e) else math.nan


def length_growth(rows: Rows) -> float:
    """Mean response length of the last 20% of steps minus that of the first 20% (tokens)."""
    return _growth(_series(rows, "length/mean"))


def uncut_length_growth(rows: Rows) -> float:
    """``length_growth`` of the responses the budget did not cut (``length/uncut_mean``): a raised budget
    lengthens cut responses by itself, so only growth of the uncut ones says the policy writes longer.
    Steps that cut every response have no value and are left out of the windows."""
    return _growth(_series(rows, "length/uncut_mean"))


def tokens_total(rows: Rows) -> float:
    """Tokens generated over the run's steps (``tokens/generated`` summed): the compute it spent
    generating. NaN for a run that did not record it."""
    tokens = _series(rows, "tokens/generated")
    tokens = tokens[np.isfinite(tokens)]
    return float(tokens.sum()) if len(tokens) else math.nan


def accuracy_final(rows: Rows) -> float:
    """The last held-out evaluation (eval/avg@n) when the run has one, else the training accuracy
    of the last 20% of steps."""
    evals = [r for r in rows if isinstance(r.get("eval/avg@n"), (int, float))]
    if evals:
        return float(max(evals, key=lambda r: r["step"])["eval/avg@n"])
    return _window_mean(_series(rows, "reward/accuracy"), "last")


def pass16_final(rows: Rows) -> float:
    """Held-out pass@16 (``eval/pass@16``, unbiased estimator) of the last evaluation that has it, the
    run's final one when ``data.final_eval_n`` >= 16: exploration kept, where pass@1 alone would not show a
    premature collapse. NaN when no evaluation sampled 16 per problem."""
    evals = [r for r in rows if isinstance(r.get("eval/pass@16"), (int, float))]
    return float(max(evals, key=lambda r: r["step"])["eval/pass@16"]) if evals else math.nan


def truncation_drop_at_stage_starts(rows: Rows) -> float:
    """Mean over stage starts of (truncation rate on the last step before - on the first step of the
    new stage): positive when a larger budget cuts fewer responses. NaN for a single-stage run."""
    stage, trunc = _series(rows, "stage"), _series(rows, "truncation/rate")
    drops = [trunc[i - 1] - trunc[i] for i in range(1, len(stage)) if stage[i] > stage[i - 1]]
    drops = [d for d in drops if np.isfinite(d)]
    return float(np.mean(drops)) if drops else math.nan


def decision_entropy_ratio(rows: Rows) -> float:
    """Entropy on the tokens whose choice changes the reward (the routes world's direction and form,
    ``launch.worlds.routes.entropy_sources.DECISIONS``) of the run's final weights over that of the
    warmed-up policy, both sampled once per validation problem with the run's seed. The all-token
    ratio mixes these with reward-idle choices RL leaves alone; NaN for a run not measured that way."""
    splits = next((r["entropy_sources/splits"] for r in rows if "entropy_sources/splits" in r), None)
    if not splits or len(splits) != 2:
        return math.nan
    start, end = (decision_entropy(s) for s in splits)
    return end / start if start > 0 else math.nan


STATISTICS: dict[str, Callable[[Rows], float]] = {
    "entropy_ratio": entropy_ratio, "entropy_final": entropy_final, "entropy_target_gap": entropy_target_gap,
    "length_growth": length_growth, "accuracy_final": accuracy_final,
    "truncation_drop_at_stage_starts": truncation_drop_at_stage_starts, "decision_entropy_ratio": decision_entropy_ratio,
    "probe_entropy_ratio": probe_entropy_ratio, "probe_entropy_final": probe_entropy_final,
    "pass16_final": pass16_final, "uncut_length_growth": uncut_length_growth, "tokens_total": tokens_total,
}
# a probe statistic -> the learner-side one it replaces in the checks (reported beside it, not judged)
LEARNER_SIDE = {"probe_entropy_ratio": "entropy_ratio", "probe_entropy_final": "entropy_final"}
REFERENCED = {"entropy_target_gap"}     # statistics that also read the paired run of the other arm


def from_step(rows: Rows, first: int) -> list[dict]:
    """The rows of steps ``first`` on: a fixed-lag-k run's first k steps train at lag < k (the ramp-in:
    no version k behind version 0), so its dose's statistics start at step k."""
    return [r for r in rows if r.get("step", 0) >= first]


def statistic(name: str, rows: Rows | None, reference: Rows | None = None, skip_steps: int = 0) -> float:
    """STATISTICS[name] of one run from step ``skip_steps`` on; NaN for a missing run (a seed that failed). A
    probe statistic reads every evaluation point: the first, step 0's, measures the initial weights, the
    same in every arm (so the lag doses share their window there too)."""
    if rows is None:
        return math.nan
    if name not in LEARNER_SIDE:          # the probe measures evaluation points, the first being step 0's
        rows = from_step(rows, skip_steps)
    if name in REFERENCED:
        return STATISTICS[name](rows, reference or ())
    return STATISTICS[name](rows)


POWER_HALF_WIDTH = 0.05     # the 95% half-width a verdict on the entropy ratio should reach (DESIGN.md)
NON_INFERIORITY_MARGIN = 0.05   # "not lower": not lower by more than this (an accuracy, a rate)
Expect = Literal["higher", "lower", "differ", "not_lower"]
UNSCALED = {"length_growth", "uncut_length_growth", "tokens_total"}   # in tokens: ± 0.05 tokens is no target


def power_target(statistic: str) -> float | None:
    """The half-width a verdict on ``statistic`` should reach; None where ± 0.05 means nothing (tokens)."""
    return None if statistic in UNSCALED else POWER_HALF_WIDTH


@dataclass(frozen=True)
class Verdict:
    verdict: Literal["agrees", "disagrees", "inconclusive"]
    effect: float                        # mean paired difference stat(B) - stat(A)
    spread: float                        # its standard deviation across seeds
    n: int                               # seeds with both runs
    t: float                             # effect / standard error
    a: list[float] = field(default_factory=list)   # stat(A) per seed
    b: list[float] = field(default_factory=list)   # stat(B) per seed
    margin: float = 0.0                  # a non-inferiority check's: the null is effect = -margin

    @property
    def half_width(self) -> float:
        """Half-width of the two-sided 95% t-interval of the effect (NaN below 2 seeds)."""
        if self.n < 2 or not math.isfinite(self.spread):
            return math.nan
        return half_width(self.spread, self.n)

    def seeds_for(self, target: float = POWER_HALF_WIDTH) -> int | None:
        """Seeds this spread would need for a 95% half-width within ``target`` (None without a spread)."""
        if self.n < 2 or not math.isfinite(self.spread):
            return None
        n = 2
        while half_width(self.spread, n) > target and n < 10_000:
            n += 1
        return n

    @property
    def p(self) -> float:
        """Two-sided p-value of the paired t-test of effect = -margin (0 but for non-inferiority; NaN below
        2 seeds): below 0.05 exactly when the verdict is not inconclusive."""
        if self.n < 2 or math.isnan(self.t):
            return math.nan
        return t_two_sided_p(_t_stat(self.effect + self.margin, self.spread, self.n), self.n - 1)

    def line(self, target: float | None = POWER_HALF_WIDTH) -> str:
        """The verdict, its effect and interval; where the interval is wider than ``target``, about how
        many seeds would narrow it to that (no target: no estimate)."""
        if self.n == 0:       # e.g. the decision-entropy split, which only the routes world's runs record
            return f"{self.verdict}: not measured (no seed has this statistic for both arms)"
        text = (f"{self.verdict}: effect {self.effect:+.4f}, 95% CI ± {self.half_width:.4f} "
                f"(sd {self.spread:.4f} over {self.n} seeds, t = {self.t:+.2f})")
        if self.margin:
            text += f", judged against -{self.margin:g} (not lower by more than {self.margin:g})"
        if target is not None and self.half_width > target and (need := self.seeds_for(target)) is not None:
            text += f"; wider than ± {target}: about {need} seeds at this spread would reach it"
        return text


def half_width(spread: float, n: int) -> float:
    """Half-width of the two-sided 95% t-interval of a mean over ``n`` values of standard deviation ``spread``."""
    return t95(n - 1) * spread / math.sqrt(n)


def t95(dof: int) -> float:
    """Two-sided 95% quantile of Student's t: the table to 30 degrees of freedom, then the Cornish-Fisher
    expansion around z = 1.96 (within 0.001 of the exact quantile there: 2.021 at 40, 2.000 at 60)."""
    if dof in T95:
        return T95[dof]
    z = 1.959964
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def t_two_sided_p(t: float, dof: int) -> float:
    """P(|T| >= |t|) for Student's t with ``dof`` degrees of freedom: the regularized incomplete beta
    I_x(dof/2, 1/2) at x = dof / (dof + t^2)."""
    if math.isinf(t):
        return 0.0
    return _betainc(dof / 2, 0.5, dof / (dof + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz;
    the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where the fraction converges slowly)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return front * (f - 1.0)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values over the family ``p_values`` (NaN: a check not measured, left out of
    the family and NaN in the result): the i-th smallest of m p-values times (m - i + 1), made monotone and
    capped at 1. A check holds at family-wise level alpha when its adjusted p is below alpha."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m, out, running = len(ranked), [math.nan] * len(p_values), 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def _t_stat(x: float, spread: float, n: int) -> float:
    """``x`` over the standard error of a mean of ``n`` values of standard deviation ``spread`` (±inf when
    they all agree, NaN below 2 values)."""
    if n < 2:
        return math.nan
    se = spread / math.sqrt(n)
    return x / se if se > 0 else (math.copysign(math.inf, x) if x else math.nan)


def judge(a: Sequence[float], b: Sequence[float], expect: Expect) -> Verdict:
    """The verdict on ``stat(B) - stat(A)`` being ``expect`` (paired by position = seed; module docstring)."""
    pairs = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    d = np.array([y - x for x, y in pairs])
    n = len(d)
    margin = NON_INFERIORITY_MARGIN if expect == "not_lower" else 0.0
    if n == 0:
        return Verdict("inconclusive", math.nan, math.nan, 0, math.nan, list(a), list(b), margin)
    effect = float(d.mean())
    spread = float(d.std(ddof=1)) if n > 1 else math.nan
    t, t_null = _t_stat(effect, spread, n), _t_stat(effect + margin, spread, n)
    verdict: Literal["agrees", "disagrees", "inconclusive"] = "inconclusive"
    if n > 1 and math.isfinite(effect) and abs(t_null) > t95(n - 1):
        if expect == "differ":
            verdict = "agrees"
        else:
            sign = -1 if expect == "lower" else 1
            verdict = "agrees" if t_null * sign > 0 else "disagrees"
    return Verdict(verdict, effect, spread, n, t, list(a), list(b), margin)


def slope(doses: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against ``doses`` over the finite points; NaN with fewer than
    two distinct doses among them."""
    pts = [(x, y) for x, y in zip(doses, values) if math.isfinite(y)]
    if len({x for x, _ in pts}) < 2:
        return math.nan
    x, y = np.array(pts, dtype=float).T
    return float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())


def judge_slope(doses: Sequence[float], per_dose: Sequence[Sequence[float]], expect: Literal["higher", "lower"],
                reference: tuple[Sequence[float], Sequence[Sequence[float]]] | None = None) -> Verdict:
    """The verdict on the slope of a statistic against the dose being positive (``higher``) or negative
    (``lower``). ``per_dose[i][s]`` is the statistic of dose ``doses[i]``'s run with seed s (NaN: missing);
    each seed's slope is fitted over its own runs, then the slopes are judged against 0 (``judge``), or,
    given ``reference`` (its doses and per_dose), against the same seed's slope over the reference curve.
    The Verdict's ``b`` holds the slope per seed, ``a`` the reference's (zeros without one)."""
    slopes = _slopes_per_seed(doses, per_dose)
    if reference is None:
        return judge([0.0] * len(slopes), slopes, expect)
    against = _slopes_per_seed(*reference)
    seeds = max(len(slopes), len(against))
    pad = lambda v: v + [math.nan] * (seeds - len(v))      # noqa: E731  (a seed missing on one side: unpaired)
    return judge(pad(against), pad(slopes), expect)


def _slopes_per_seed(doses: Sequence[float], per_dose: Sequence[Sequence[float]]) -> list[float]:
    n_seeds = max((len(v) for v in per_dose), default=0)
    column = [[v[s] if s < len(v) else math.nan for v in per_dose] for s in range(n_seeds)]
    return [slope(doses, values) for values in column]
