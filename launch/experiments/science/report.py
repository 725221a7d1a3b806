"""The science report: one self-contained HTML file (figures inlined) and a CSV, a verdict row per check.

Figures per finding: entropy, accuracy, response length and clip fraction vs step; one line per
arm (the mean over its seeds) with the seeds' min..max shaded. A finding with dose-response checks
(lag) also gets their figure: each checked statistic against the dose, one dot per seed, the mean
over seeds joined by a line. Every finding gets the entropy mechanism's figure
(``launch.experiments.analysis.entropy_mechanism``): per interval between two evaluations of each run, the
learner's cov(log-prob, advantage) summed over the interval's updates against the probe entropy's change,
or a line saying why it could not be drawn.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from launch.experiments.analysis.entropy_mechanism import covariance_entropy_pairs, plot_covariance_entropy
from launch.experiments.science.findings import Finding, SlopeCheck
from launch.experiments.science.verdict import (
    LEARNER_SIDE,
    Verdict,
    holm,
    judge,
    judge_slope,
    power_target,
    statistic,
)

PANELS = (("probe/entropy", "probe entropy (temperature 1, evaluations)"), ("entropy/mean", "entropy (learner side)"),
          ("cov/logp_adv", "cov(log-prob, advantage), trained tokens"), ("reward/accuracy", "accuracy (training)"),
          ("length/mean", "response length (tokens)"), ("clip/frac", "clipped-token fraction"))
CSV_FIELDS = ("finding", "claim", "statistic", "arm_a", "arm_b", "expect", "paper", "verdict", "effect",
              "half_width_95", "spread", "seeds", "t", "p", "p_holm", "verdict_holm", "shares_reference_with",
              "stat_a_per_seed", "stat_b_per_seed", "learner_side_statistic", "learner_side_effect",
              "learner_side_verdict", "source")
EVALUATION_KEYS = ("probe/", "eval/")     # written by the evaluations (launch.run.evaluation), not the steps
ALPHA = 0.05            # the family-wise level of the Holm-adjusted verdicts
COVARIANCE_CAPTION = ("The entropy mechanism: a dot per interval between two evaluations of a run (every arm "
                      "and seed), the learner's cov(log-prob, advantage) over its trained tokens summed over the "
                      "interval's updates against the probe entropy's change over it. To first order a "
                      "policy-gradient update lowers the entropy by about lr x that covariance (Cui et al. "
                      "2025), so the theory expects a negative relation.")
NO_COVARIANCE = ("No entropy-mechanism figure: no run of this finding has the probe's entropy at two "
                 "consecutive evaluations and cov/logp_adv at every step between them.")


@dataclass
class CheckResult:
    finding: Finding
    claim: str
    statistic: str
    arm_a: str | None
    arm_b: str
    expect: str
    paper: str
    verdict: Verdict
    p_holm: float = math.nan             # Holm-adjusted over the report's family of checks (correct_for_checks)
    learner_side: Verdict | None = None  # a probe check: the same comparison on the learner-side entropy
    shares_reference_with: tuple[str, ...] = ()     # other findings whose checks read the same reference runs

    @property
    def verdict_holm(self) -> str:
        """The verdict at family-wise level ALPHA: the raw one where its adjusted p is below ALPHA, else
        inconclusive."""
        return self.verdict.verdict if self.p_holm < ALPHA else "inconclusive"

    def line(self) -> str:
        """The verdict's line, with a seed estimate where ± 0.05 is a target for this statistic."""
        text = self.verdict.line(power_target(self.statistic))
        if self.learner_side is not None:
            v = self.learner_side
            text += (f"; learner side ({LEARNER_SIDE[self.statistic]}, not judged in the family): {v.verdict}, "
                     f"effect {v.effect:+.4f}")
        return text


def evaluate(finding: Finding, rows_by_arm: dict[str, list[list[dict] | None]]) -> list[CheckResult]:
    """Verdicts of one finding; ``rows_by_arm[arm]`` = one rows list per seed, in seed order, None
    where that seed's run is missing (so seed s of one arm always pairs with seed s of the other).
    Each arm's statistics leave out its first ``skip_steps`` steps."""
    out = []
    for c in finding.checks:
        twin = LEARNER_SIDE.get(c.statistic)
        out.append(CheckResult(finding, c.claim, c.statistic, c.a, c.b, c.expect, c.paper,
                               _judge(finding, c, c.statistic, rows_by_arm),
                               learner_side=_judge(finding, c, twin, rows_by_arm) if twin else None))
    return out


def _judge(finding: Finding, c, name: str, rows_by_arm: dict[str, list[list[dict] | None]]) -> Verdict:
    """Check ``c`` judged on the statistic ``name``."""
    skip = {a.name: a.skip_steps for a in finding.arms}
    if isinstance(c, SlopeCheck):
        c = replace(c, statistic=name)
        reference = None
        if c.against:
            reference = ([dose for _, dose in c.against], dose_statistics(finding, c, rows_by_arm, c.against))
        return judge_slope([dose for _, dose in c.doses], dose_statistics(finding, c, rows_by_arm), c.expect,
                           reference=reference)
    runs_b = rows_by_arm.get(c.b, [])
    runs_a = rows_by_arm.get(c.a, []) if c.a is not None else []
    runs_a = list(runs_a) + [None] * (len(runs_b) - len(runs_a))
    b = [statistic(name, rb, ra, skip.get(c.b, 0)) for rb, ra in zip(runs_b, runs_a)]
    a = ([statistic(name, ra, rb, skip.get(c.a, 0)) for ra, rb in zip(runs_a, runs_b)]
         if c.a is not None else [0.0] * len(b))
    return judge(a, b, c.expect)


def dose_statistics(finding: Finding, check: SlopeCheck, rows_by_arm: dict[str, list[list[dict] | None]],
                    doses: tuple[tuple[str, float], ...] | None = None) -> list[list[float]]:
    """``[dose][seed]``: the check's statistic of each dose's run per seed (NaN where missing), each arm's
    first ``skip_steps`` steps left out; over ``doses`` (the check's reference curve) instead of its own."""
    skip = {a.name: a.skip_steps for a in finding.arms}
    return [[statistic(check.statistic, rows, None, skip.get(arm, 0)) for rows in rows_by_arm.get(arm, [])]
            for arm, _ in (check.doses if doses is None else doses)]


def correct_for_checks(results: list[CheckResult], reference_run: dict[tuple[str, str], str]) -> list[CheckResult]:
    """Every check of the report is one family: Holm-Bonferroni adjusted p-values into ``p_holm`` (a check
    not measured, p NaN, is left out of the family). ``reference_run[(finding, arm)]`` names the runs of an arm
    (its seed-0 run key): checks of other findings whose reference arm is the same runs are named in
    ``shares_reference_with``; their verdicts are not independent."""
    for r, adjusted in zip(results, holm([r.verdict.p for r in results])):
        r.p_holm = adjusted
    findings_of: dict[str, set[str]] = {}
    for r in results:
        if r.arm_a is not None and (run := reference_run.get((r.finding.key, r.arm_a))):
            findings_of.setdefault(run, set()).add(r.finding.key)
    for r in results:
        run = reference_run.get((r.finding.key, r.arm_a)) if r.arm_a is not None else None
        r.shares_reference_with = tuple(sorted(findings_of.get(run, set()) - {r.finding.key})) if run else ()
    return results


def _family(results: list[CheckResult]) -> int:
    return sum(1 for r in results if math.isfinite(r.verdict.p))


def write_csv(results: list[CheckResult], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        w.writeheader()
        for r in results:
            v = r.verdict
            w.writerow({"finding": r.finding.key, "claim": r.claim, "statistic": r.statistic, "arm_a": r.arm_a or "0",
                        "arm_b": r.arm_b, "expect": r.expect, "paper": r.paper, "verdict": v.verdict,
                        "effect": _num(v.effect), "half_width_95": _num(v.half_width), "spread": _num(v.spread),
                        "seeds": v.n, "t": _num(v.t), "p": _num(v.p), "p_holm": _num(r.p_holm),
                        "verdict_holm": r.verdict_holm,
                        "shares_reference_with": " ".join(r.shares_reference_with),
                        "stat_a_per_seed": " ".join(_num(x) for x in v.a),
                        "stat_b_per_seed": " ".join(_num(x) for x in v.b),
                        "learner_side_statistic": LEARNER_SIDE.get(r.statistic, ""),
                        "learner_side_effect": _num(r.learner_side.effect) if r.learner_side else "",
                        "learner_side_verdict": r.learner_side.verdict if r.learner_side else "",
                        "source": r.finding.source})
    return path


def _num(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.6g}"


def figure_png(finding: Finding, rows_by_arm: dict[str, list[list[dict] | None]]) -> bytes:
    """The finding's four panels as a PNG: per arm the mean over seeds, shaded min..max."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.0))
    for ax, (key, title) in zip(axes, PANELS):
        for arm, runs in rows_by_arm.items():
            steps, mean, lo, hi = seed_band(runs, key)
            if len(steps):
                line, = ax.plot(steps, mean, label=arm, linewidth=1.3)
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def dose_response_png(finding: Finding, rows_by_arm: dict[str, list[list[dict] | None]]) -> bytes | None:
    """The finding's dose-response checks as a PNG (one panel each: statistic against dose, a dot per
    seed, the seeds' mean joined by a line); None when it has none."""
    checks = [c for c in finding.checks if isinstance(c, SlopeCheck)]
    if not checks:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(checks), figsize=(4.6 * len(checks), 3.2), squeeze=False)
    for ax, check in zip(axes[0], checks):
        # a check against a reference curve (the lag dose under a correction against plain PPO) draws both
        curves = [("", check.doses, "k")] + ([("reference: ", check.against, "tab:gray")] if check.against else [])
        for label, dose_arms, colour in curves:
            doses = np.array([dose for _, dose in dose_arms])
            values = np.array(dose_statistics(finding, check, rows_by_arm, dose_arms), dtype=float)  # (doses, seeds)
            for seed in range(values.shape[1] if values.ndim == 2 else 0):
                ax.plot(doses, values[:, seed], "o", color=colour, alpha=0.4, markersize=4,
                        label=f"{label}seed {seed}" if seed == 0 else None)
            with warnings.catch_warnings():         # a dose with no finished run: NaN, said by the dots' absence
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=1) if values.size else np.full(len(doses), np.nan)
            ax.plot(doses, mean, "-", color=colour, linewidth=1.3, label=f"{label}{dose_arms[0][0]} ... mean")
        ax.set_xticks(sorted({dose for _, dose in check.doses}))
        ax.set_title(f"{check.statistic} against the dose", fontsize=9)
        ax.set_xlabel("dose (" + finding.key + ")", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def covariance_png(rows_by_arm: dict[str, list[list[dict] | None]]) -> bytes | None:
    """The entropy mechanism's scatter as a PNG (``COVARIANCE_CAPTION``): every seed's intervals, a colour per
    arm; None when no run has an interval to pair."""
    pairs_by_arm = {arm: [p for rows in runs if rows is not None for p in covariance_entropy_pairs(rows)]
                    for arm, runs in rows_by_arm.items()}
    if not any(pairs_by_arm.values()):
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    plot_covariance_entropy(ax, pairs_by_arm)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def seed_band(runs: list[list[dict] | None], key: str) -> tuple[np.ndarray, ...]:
    """Steps present in every seed's run, and the mean / min / max of ``key`` over the seeds there: read from
    the evaluation rows for an evaluation key (``probe/``, ``eval/``), else from the step rows."""
    evaluated = key.startswith(EVALUATION_KEYS)
    per_run = [{r["step"]: float(r[key]) for r in rows
                if isinstance(r.get(key), (int, float)) and ("updates" in r) != evaluated}
               for rows in runs if rows is not None]
    per_run = [p for p in per_run if p]
    if not per_run:
        return (np.array([]),) * 4
    steps = sorted(set.intersection(*(set(p) for p in per_run)))
    values = np.array([[p[s] for s in steps] for p in per_run])          # (seeds, steps)
    return np.array(steps), values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def write_html(results: list[CheckResult], figures: dict[str, bytes], path: Path, *, title: str,
               preamble: str, dose_figures: dict[str, bytes] | None = None,
               covariance_figures: dict[str, bytes] | None = None) -> Path:
    """The report; ``figures[key]`` is a finding's step figure, ``dose_figures[key]`` its dose-response one,
    ``covariance_figures[key]`` its entropy-mechanism one (a finding without one says so: ``NO_COVARIANCE``)."""
    esc = html.escape
    rows = "".join(
        f"<tr class='{r.verdict.verdict}'><td>{esc(r.finding.key)}</td><td>{esc(r.claim)}</td>"
        f"<td>{esc(r.statistic)}</td><td>{esc(r.arm_b)} vs {esc(r.arm_a or '0')}</td><td>{r.expect}</td>"
        f"<td>{esc(r.paper)}</td>"
        f"<td>{_num(r.verdict.effect)} ± {_num(r.verdict.half_width)} (sd {_num(r.verdict.spread)}, "
        f"n={r.verdict.n}, t={_num(r.verdict.t)})</td>"
        f"<td><b>{r.verdict.verdict}</b> (p {_num(r.verdict.p)})</td><td><b>{r.verdict_holm}</b> "
        f"(p {_num(r.p_holm)})</td><td>{esc(' '.join(r.shares_reference_with))}</td></tr>" for r in results)
    sections = []
    for f in {r.finding.key: r.finding for r in results}.values():
        checks = "".join(f"<li>{esc(r.claim)}: <b>{r.verdict.verdict}</b>, {esc(r.line())}</li>"
                         for r in results if r.finding.key == f.key)
        covariance = (covariance_figures or {}).get(f.key)
        arms = "".join(f"<li><code>{esc(a.name)}</code>: preset <code>{esc(a.preset)}</code> "
                       f"{esc(' '.join((*f.overrides, *a.overrides)))}</li>" for a in f.arms)
        images = "".join(
            f"<img alt='{esc(f.key)} {kind}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
            for kind, png in (("steps", figures.get(f.key)), ("dose-response", (dose_figures or {}).get(f.key)),
                              ("covariance", covariance))
            if png)
        sections.append(
            f"<h2>{esc(f.title)}</h2><p>{esc(f.source)}. World: {f.world}. {esc(f.notes)}</p>"
            f"<p>Arms (everything else equal, the learning rate included):</p><ul>{arms}</ul><ul>{checks}</ul>"
            + images + f"<p>{esc(COVARIANCE_CAPTION if covariance else NO_COVARIANCE)}</p>")
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>"
        "body{font-family:sans-serif;max-width:1400px;margin:2em auto}td,th{border:1px solid #ccc;padding:4px}"
        "table{border-collapse:collapse}.agrees{background:#e6f5e6}.disagrees{background:#fbe3e3}"
        ".inconclusive{background:#f5f5e0}img{max-width:100%}</style></head><body>"
        f"<h1>{esc(title)}</h1><p>{esc(preamble)}</p>"
        "<table><tr><th>finding</th><th>claim</th><th>statistic</th><th>compared</th><th>expected</th>"
        "<th>the paper reports</th>"
        f"<th>effect ± 95% CI half-width</th><th>verdict</th><th>Holm-adjusted over the {_family(results)} "
        f"checks</th><th>reference runs shared with</th></tr>{rows}</table>{''.join(sections)}</body></html>")
    return path
