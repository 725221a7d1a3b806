"""The entropy mechanism, measured: what the learner's covariance predicts against how the probe's entropy moved.

To first order a policy-gradient update moves a softmax policy's entropy by about -lr x Cov(log pi(a), A(a))
over the tokens it trains (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"): tokens both
likely and advantaged (positive covariance) sharpen the policy, so the entropy falls. The learner logs that
covariance per step (``cov/logp_adv``, ``learner.lag.finish_covariance``); the probe measures the policy's own
entropy at every evaluation point (``probe/entropy``, ``launch.run.probe``). :func:`covariance_entropy_pairs`
pairs the two per interval between evaluations; :func:`plot_covariance_entropy` draws the pairs of many runs
(the science report draws one such figure per finding).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from launch.experiments.analysis.plots import is_finite, no_data

if TYPE_CHECKING:
    from matplotlib.axes import Axes

COVARIANCE = "cov/logp_adv"
PROBE_ENTROPY = "probe/entropy"
Pair = tuple[float, float]


def covariance_entropy_pairs(rows: Sequence[dict]) -> list[Pair]:
    """One run's ``(covariance, entropy change)`` per interval between two consecutive evaluation points, in
    step order.

    Evaluation points are the rows carrying ``probe/entropy`` (the probe runs at every evaluation); step rows
    are those carrying ``updates``. A step row's ``step`` is the number of steps done before it (``learner.loop``
    writes ``steps_done`` into the row, then counts the step) and an evaluation row's the number done when it
    measured (``learner.steps_done``, ``launch.run.evaluation``): the evaluation at step s measures the weights
    after s steps, so between the evaluations at s0 and s1 the step rows s0 .. s1 - 1 trained.

    covariance: the sum over those steps of ``cov/logp_adv`` x ``updates``. A step's covariance is a token mean
    over its updates, so this is about its sum over the interval's optimizer updates, the quantity the
    first-order entropy change adds up (an arm of 16 updates a step adds 16 of them).
    entropy change: ``probe/entropy`` at s1 minus at s0 (the policy's entropy at temperature 1, nats/token).

    An interval is left out, not filled in, when either probe entropy is not a finite number or one of its
    steps has no row, no finite covariance or no update count."""
    probes = {r["step"]: r[PROBE_ENTROPY] for r in rows if PROBE_ENTROPY in r}
    steps = {r["step"]: r for r in rows if "updates" in r}
    points = sorted(probes)
    pairs = []
    for s0, s1 in zip(points, points[1:]):
        covariances = [_covariance_over_updates(steps.get(s)) for s in range(s0, s1)]
        if is_finite(probes[s0]) and is_finite(probes[s1]) and all(map(math.isfinite, covariances)):
            pairs.append((float(sum(covariances)), float(probes[s1]) - float(probes[s0])))
    return pairs


def _covariance_over_updates(step: dict | None) -> float:
    """A step row's covariance summed over its updates; NaN when the step has no row or either value."""
    if step is None or not (is_finite(step.get(COVARIANCE)) and is_finite(step.get("updates"))):
        return math.nan
    return float(step[COVARIANCE]) * float(step["updates"])


def least_squares(pairs: Sequence[Pair]) -> tuple[float, float, float] | None:
    """(slope, intercept, Pearson r) of the entropy change against the covariance; None with fewer than two
    distinct covariances (no line). r is NaN when every change is the same."""
    x, y = np.array(pairs, dtype=float).reshape(-1, 2).T
    if len(set(x)) < 2:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    with np.errstate(invalid="ignore", divide="ignore"):     # constant changes: r undefined, NaN
        r = np.corrcoef(x, y)[0, 1]
    return float(slope), float(intercept), float(r)


def plot_covariance_entropy(ax: Axes, pairs_by_arm: dict[str, list[Pair]]) -> int:
    """A dot per interval, one colour per arm, with the least-squares line over all the dots and their
    correlation in the title (the theory expects r < 0); returns the dots drawn (0 and a "no data" note
    when there are none)."""
    title = "probe entropy change vs covariance"
    every = [p for pairs in pairs_by_arm.values() for p in pairs]
    if not every:
        return no_data(ax, title, [COVARIANCE, PROBE_ENTROPY])
    for i, (arm, pairs) in enumerate(pairs_by_arm.items()):
        if pairs:
            ax.scatter(*zip(*pairs), s=16, alpha=0.7, color=f"C{i % 10}", label=arm)
    fit = least_squares(every)
    if fit is None:
        title += f": {len(every)} intervals, one covariance (no line)"
    else:
        slope, intercept, r = fit
        xs = np.array([min(x for x, _ in every), max(x for x, _ in every)])
        ax.plot(xs, slope * xs + intercept, "k-", linewidth=1, label=f"least squares (slope {slope:.3g})")
        title += f": r = {r:+.2f} over {len(every)} intervals (theory: r < 0)"
    ax.axhline(0, color="gray", linewidth=0.5)
    ax.axvline(0, color="gray", linewidth=0.5)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("cov(log-prob, advantage) summed over the interval's updates", fontsize=8)
    ax.set_ylabel("probe entropy change (nats/token)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    return len(every)
