"""Science verdicts: statistics of a run's rows and paired-by-seed judgements, by hand."""

import math

import pytest

from launch.science.verdict import (
    T95,
    accuracy_final,
    entropy_ratio,
    entropy_target_gap,
    judge,
    length_growth,
    truncation_drop_at_stage_starts,
)


def _rows(key, values, **extra):
    return [{"step": i, key: v, **{k: (vs[i] if isinstance(vs, list) else vs) for k, vs in extra.items()}}
            for i, v in enumerate(values)]


def test_statistics_by_hand():
    # 10 steps: first 20% = steps 0-1, last 20% = steps 8-9
    rows = _rows("entropy/mean", [0.5, 0.3, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.2, 0.1], **{"entropy/target": 0.2})
    assert entropy_ratio(rows) == pytest.approx(0.15 / 0.4)
    assert entropy_target_gap(rows) == pytest.approx(0.05)
    # a run without a target of its own (no entropy term) is measured against its pair's target
    untargeted = _rows("entropy/mean", [0.5, 0.3, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.1, 0.1])
    assert math.isnan(entropy_target_gap(untargeted))
    assert entropy_target_gap(untargeted, rows) == pytest.approx(0.1)
    assert entropy_target_gap(rows, untargeted) == pytest.approx(0.05)       # its own target first
    assert length_growth(_rows("length/mean", [10, 20, 0, 0, 0, 0, 0, 0, 50, 70])) == pytest.approx(60 - 15)
    assert entropy_ratio(list(reversed(rows))) == pytest.approx(0.15 / 0.4)        # sorted by step
    # accuracy: the last evaluation wins over training accuracy
    assert accuracy_final(_rows("reward/accuracy", [0.1] * 5) + [{"step": 2, "eval/avg@n": 0.4},
                                                                  {"step": 4, "eval/avg@n": 0.5}]) == 0.5
    assert accuracy_final(_rows("reward/accuracy", [0.1, 0.2, 0.3, 0.4, 0.6])) == pytest.approx(0.6)


def test_truncation_drop_at_stage_starts():
    rows = _rows("truncation/rate", [0.5, 0.6, 0.1, 0.3, 0.4, 0.0], stage=[0, 0, 1, 1, 1, 2])
    assert truncation_drop_at_stage_starts(rows) == pytest.approx(((0.6 - 0.1) + (0.4 - 0.0)) / 2)
    assert math.isnan(truncation_drop_at_stage_starts(_rows("truncation/rate", [0.5, 0.4], stage=[0, 0])))


def test_judge_paired_by_seed():
    # d = [-0.10, -0.12, -0.11]: mean -0.11, sd 0.01, se 0.00577, t = -19.05 > 4.303 (2 dof)
    v = judge([0.9, 0.8, 0.85], [0.8, 0.68, 0.74], "lower")
    assert v.verdict == "agrees" and v.effect == pytest.approx(-0.11) and v.spread == pytest.approx(0.01)
    assert v.t == pytest.approx(-0.11 / (0.01 / math.sqrt(3))) and v.n == 3
    assert judge([0.9, 0.8, 0.85], [0.8, 0.68, 0.74], "higher").verdict == "disagrees"
    # d = [+0.1, -0.1, +0.05]: the interval contains 0
    assert judge([0.5, 0.5, 0.5], [0.6, 0.4, 0.55], "higher").verdict == "inconclusive"
    # one seed or NaN pairs: never a verdict
    assert judge([0.5], [0.1], "lower").verdict == "inconclusive"
    assert judge([0.5, math.nan], [0.1, 0.2], "lower").n == 1
    # just inside / outside the t threshold with 2 seeds (1 dof: 12.706)
    d, sd = 1.0, math.sqrt(2) * 1.0 / 12.706 * 0.99          # t just above the threshold
    assert judge([0.0, 0.0], [d - sd / math.sqrt(2), d + sd / math.sqrt(2)], "higher").verdict == "agrees"
    assert T95[2] == 4.303


def test_evaluate_pairs_by_seed_when_a_run_is_missing():
    from launch.science.findings import Arm, Check, Finding
    from launch.science.report import evaluate

    f = Finding("k", "t", "src", "tiny", (Arm("a", "p"), Arm("b", "q")),
                (Check("b keeps less", "entropy_final", "a", "b", "lower"),
                 Check("b nearer the target", "entropy_target_gap", "a", "b", "lower")))
    run = lambda e, target=None: _rows("entropy/mean", [e] * 5, **({"entropy/target": target} if target else {}))
    # seed 1 of arm b failed: seed 2 of b must still pair with seed 2 of a (not with seed 1)
    by_arm = {"a": [run(0.5, 0.2), run(0.4, 0.2), run(0.3, 0.2)], "b": [run(0.25), None, run(0.125)]}
    final, gap = evaluate(f, by_arm)
    assert final.verdict.n == 2 and final.verdict.effect == pytest.approx(((0.25 - 0.5) + (0.125 - 0.3)) / 2)
    assert math.isnan(final.verdict.b[1])
    # b has no target: measured against a's 0.2 -> gaps 0.05, 0.075 vs a's 0.3, 0.1
    assert gap.verdict.b[0] == pytest.approx(0.05) and gap.verdict.b[2] == pytest.approx(0.075)
    assert gap.verdict.effect == pytest.approx(((0.05 - 0.3) + (0.075 - 0.1)) / 2)
