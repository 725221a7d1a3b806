"""launch.experiments.analysis.entropy_mechanism: the learner's covariance per interval between evaluations
against the probe entropy's change, and the science report's figure of them (drawn, or its absence said)."""

from __future__ import annotations

import html
import math

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from launch.experiments.analysis.entropy_mechanism import (  # noqa: E402
    covariance_entropy_pairs,
    least_squares,
    plot_covariance_entropy,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _step(step: int, cov: float, updates: int = 1) -> dict:
    return {"step": step, "updates": updates, "cov/logp_adv": cov, "entropy/mean": 0.4}


def _eval(step: int, probe: float) -> dict:
    return {"step": step, "version": step, "eval/avg@n": 0.3, "probe/entropy": probe}


def _run() -> list[dict]:
    """Step rows first, evaluation rows after them (as ``launch.run.summary.read_run_rows`` returns a run).

    evaluations 0 -> 3: steps 0, 1, 2: 0.01 x 1 + 0.02 x 2 + 0.03 x 4 = 0.17; probe 0.50 -> 0.40: -0.10
    evaluations 3 -> 6: step 4's covariance is NaN: left out
    evaluations 6 -> 8: steps 6, 7: -0.02 + 0.04 = 0.02; probe 0.35 -> 0.30: -0.05
    evaluations 8 -> 10: step 9 has no row: left out
    evaluations 10 -> 12: the probe at 12 is NaN: left out
    Step 3 (0.05) trains after the evaluation at 3: counting steps s0 + 1 .. s1 instead would give the first
    interval 0.04 + 0.12 + 0.05 = 0.21."""
    steps = [_step(0, 0.01), _step(1, 0.02, 2), _step(2, 0.03, 4), _step(3, 0.05), _step(4, math.nan),
             _step(5, 0.05), _step(6, -0.02), _step(7, 0.04), _step(8, 0.01), _step(10, 0.01), _step(11, 0.01)]
    evals = [_eval(0, 0.50), _eval(3, 0.40), _eval(6, 0.35), _eval(8, 0.30), _eval(10, 0.28), _eval(12, math.nan)]
    return steps + evals


def test_pairs_by_hand():
    pairs = covariance_entropy_pairs(_run())
    assert len(pairs) == 2
    assert pairs[0] == pytest.approx((0.17, -0.10)) and pairs[1] == pytest.approx((0.02, -0.05))


def test_no_pairs_without_the_covariance_or_the_probe():
    no_covariance = [{k: v for k, v in r.items() if k != "cov/logp_adv"} for r in _run()]
    no_probe = [{k: v for k, v in r.items() if k != "probe/entropy"} for r in _run()]
    assert covariance_entropy_pairs(no_covariance) == [] and covariance_entropy_pairs(no_probe) == []
    assert covariance_entropy_pairs([_step(0, 0.01), _eval(0, 0.5)]) == []          # one evaluation: no interval


def test_least_squares_by_hand():
    # x 0 1 2 (mean 1, Sxx 2), y .1 -.1 -.1 (mean -1/30): Sxy = -0.2, Syy = 2/75
    # slope -0.1, intercept -1/30 + 0.1 = 1/15, r = -0.2 / sqrt(2 x 2/75) = -sqrt(3)/2
    slope, intercept, r = least_squares([(0.0, 0.1), (1.0, -0.1), (2.0, -0.1)])
    assert slope == pytest.approx(-0.1) and intercept == pytest.approx(1 / 15) and r == pytest.approx(-math.sqrt(3) / 2)
    assert least_squares([(1.0, 0.1), (1.0, -0.1)]) is None                          # one covariance: no line
    assert math.isnan(least_squares([(0.0, 0.1), (1.0, 0.1)])[2])                    # constant change: r undefined


def test_plot_a_colour_per_arm_and_the_fit_in_the_title():
    fig, ax = plt.subplots()
    drawn = plot_covariance_entropy(ax, {"on-policy": [(0.0, 0.1)], "reuse": [(1.0, -0.1), (2.0, -0.1)], "empty": []})
    assert drawn == 3
    dots = ax.collections
    assert [d.get_label() for d in dots] == ["on-policy", "reuse"]
    assert (dots[0].get_facecolor() != dots[1].get_facecolor()).any()
    line = next(line for line in ax.get_lines() if line.get_label().startswith("least squares"))
    assert list(line.get_ydata()) == pytest.approx([1 / 15, 1 / 15 - 0.2])          # from x = 0 to x = 2
    assert "r = -0.87 over 3 intervals" in ax.get_title()
    plt.close(fig)
    fig, ax = plt.subplots()
    assert plot_covariance_entropy(ax, {"a": []}) == 0
    plt.close(fig)


def _report(tmp_path, by_arm: dict) -> str:
    """The finding's report section as the science report writes it (``launch.experiments.science.__main__``)."""
    from launch.experiments.science.findings import Arm, Check, Finding
    from launch.experiments.science.report import covariance_png, evaluate, write_html

    f = Finding("k", "a finding", "src", "tiny", (Arm("a", "p"), Arm("b", "q")),
                (Check("b keeps less", "probe_entropy_ratio", "a", "b", "lower"),))
    png = covariance_png(by_arm)
    assert png is None or png.startswith(PNG)
    path = write_html(evaluate(f, by_arm), {}, tmp_path / "report.html", title="t", preamble="p",
                      covariance_figures={f.key: png} if png else {})
    return path.read_text()


def test_the_report_draws_the_figure_when_the_runs_have_the_keys(tmp_path):
    from launch.experiments.science.report import COVARIANCE_CAPTION, NO_COVARIANCE

    page = _report(tmp_path, {"a": [_run(), None], "b": [_run(), _run()]})       # a missing seed is left out
    assert "<img alt='k covariance' src='data:image/png;base64," in page
    assert html.escape(COVARIANCE_CAPTION) in page and html.escape(NO_COVARIANCE) not in page


def test_the_report_says_why_without_the_keys(tmp_path):
    from launch.experiments.science.report import COVARIANCE_CAPTION, NO_COVARIANCE

    no_covariance = [{k: v for k, v in r.items() if k != "cov/logp_adv"} for r in _run()]
    page = _report(tmp_path, {"a": [no_covariance], "b": [no_covariance, None]})
    assert "k covariance" not in page and html.escape(COVARIANCE_CAPTION) not in page
    assert html.escape(NO_COVARIANCE) in page
