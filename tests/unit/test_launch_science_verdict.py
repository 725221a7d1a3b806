"""Science verdicts: statistics of a run's rows and paired-by-seed judgements, by hand."""

import math
from dataclasses import replace

import pytest

from launch.experiments.science.verdict import (
    T95,
    accuracy_final,
    entropy_ratio,
    entropy_target_gap,
    judge,
    length_growth,
    t_two_sided_p,
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


def test_pass16_length_and_token_statistics_by_hand():
    from launch.experiments.science.verdict import STATISTICS, pass16_final, tokens_total, uncut_length_growth

    # pass@16: the last evaluation that has it, by step; the final eval_n-only row (no pass@16) does not count
    evals = [{"step": 9, "eval/pass@16": 0.75}, {"step": 0, "eval/pass@16": 0.5}, {"step": 10, "eval/pass@4": 0.6}]
    assert pass16_final(_rows("reward/accuracy", [0.1] * 3) + evals) == 0.75
    assert math.isnan(pass16_final([{"step": 10, "eval/pass@4": 0.6}]))
    # 10 steps at a cap that rises at step 8: the mean length jumps with it, the uncut responses grow less
    # (NaN at step 1: every response was cut)
    rows = _rows("length/mean", [64, 64, 64, 64, 64, 64, 64, 64, 250, 256],
                 **{"length/uncut_mean": [30, math.nan, 40, 30, 30, 30, 30, 30, 50, 70], "tokens/generated":
                    [640, 640, 640, 640, 640, 640, 640, 640, 2500, 2560]})
    assert length_growth(rows) == pytest.approx(253 - 64)
    # the NaN step is left out: first 20% of the 9 values = round(1.8) = 2 -> (30 + 40) / 2; last 2 -> (50 + 70) / 2
    assert uncut_length_growth(rows) == pytest.approx(60 - 35)
    assert tokens_total(rows + [{"step": 10, "eval/avg@n": 0.5}]) == 8 * 640 + 2500 + 2560
    assert math.isnan(tokens_total(_rows("length/mean", [10, 20])))
    assert {"pass16_final", "uncut_length_growth", "tokens_total"} <= set(STATISTICS)


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
    # a statistic no run recorded (the decision split outside the routes world) says so, not "effect nan"
    none = judge([math.nan] * 3, [math.nan] * 3, "lower")
    assert none.verdict == "inconclusive" and none.line() == "inconclusive: not measured (no seed has this statistic for both arms)"
    # just inside / outside the t threshold with 2 seeds (1 dof: 12.706)
    d, sd = 1.0, math.sqrt(2) * 1.0 / 12.706 * 0.99          # t just above the threshold
    assert judge([0.0, 0.0], [d - sd / math.sqrt(2), d + sd / math.sqrt(2)], "higher").verdict == "agrees"
    assert T95[2] == 4.303


def test_evaluate_pairs_by_seed_when_a_run_is_missing():
    from launch.experiments.science.findings import Arm, Check, Finding
    from launch.experiments.science.report import evaluate

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


def test_slope_by_hand():
    from launch.experiments.science.verdict import slope

    # doses 0 1 2 4 8: mean 3, deviations -3 -2 -1 1 5, Sxx = 9+4+1+1+25 = 40
    # values 1.0 .9 .8 .7 .5: mean .78, deviations .22 .12 .02 -.08 -.28, Sxy = -.66-.24-.02-.08-1.40 = -2.40
    assert slope([0, 1, 2, 4, 8], [1.0, 0.9, 0.8, 0.7, 0.5]) == pytest.approx(-2.40 / 40)
    # a missing dose (NaN) is left out: doses 0 2 4, values 1 .8 .6 -> exactly -0.1
    assert slope([0, 1, 2, 4], [1.0, math.nan, 0.8, 0.6]) == pytest.approx(-0.1)
    assert math.isnan(slope([0, 1], [1.0, math.nan]))                          # one point: no slope


def test_judge_slope_by_hand():
    from launch.experiments.science.verdict import judge_slope

    doses = [0, 1, 2, 4, 8]
    # per seed (columns): slopes -2.40/40 = -0.06, -2.50/40 = -0.0625, -1.95/40 = -0.04875
    #   seed 1: 0.9 .85 .8 .7 .4, mean .73, deviations .17 .12 .07 -.03 -.33, Sxy = -.51-.24-.07-.03-1.65 = -2.50
    #   seed 2: 1.0 .95 .85 .8 .6, mean .84, deviations .16 .11 .01 -.04 -.24, Sxy = -.48-.22-.01-.04-1.20 = -1.95
    per_dose = [[1.0, 0.9, 1.0], [0.9, 0.85, 0.95], [0.8, 0.8, 0.85], [0.7, 0.7, 0.8], [0.5, 0.4, 0.6]]
    v = judge_slope(doses, per_dose, "lower")
    assert v.b == pytest.approx([-0.06, -0.0625, -0.04875]) and v.n == 3
    # mean -0.17125/3 = -0.0570833; deviations -0.0029167 -0.0054167 +0.0083333, sum of squares 1.07292e-4,
    # sd = sqrt(1.07292e-4 / 2) = 0.0073243; se = 0.0042287; t = -13.499; half-width 4.303 * se = 0.018196
    assert v.effect == pytest.approx(-0.0570833, abs=1e-7) and v.spread == pytest.approx(0.0073243, abs=1e-7)
    assert v.t == pytest.approx(-13.499, abs=1e-3) and v.half_width == pytest.approx(0.018196, abs=1e-6)
    assert v.verdict == "agrees" and judge_slope(doses, per_dose, "higher").verdict == "disagrees"
    assert "95% CI ± 0.0182" in v.line()
    # a flat response: slopes 0.1, -0.1 -> inconclusive
    assert judge_slope([0, 1], [[0.5, 0.6], [0.6, 0.5]], "lower").verdict == "inconclusive"
    assert math.isnan(judge([0.5], [0.1], "lower").half_width)                  # one seed: no interval


def test_lag_dose_response_leaves_out_the_ramp_in():
    """The checks read the probe: evaluation points at step 0 (the initial weights, 0.5 in every dose) and at
    step 9 (0.5 r), so each dose's ratio is r = 1 - c_s * k: slopes -c_s = -0.05, -0.04, -0.06. The
    learner-side twin, reported beside it, is measured over the same steps for every dose, from the largest
    k (8) on: a lag-k run's first k steps (lag < k) and, for equal windows, every run's first 8 hold 5.0
    here, which would swamp every ratio. Kept: steps 8, 9 (windows of 1 step): 1.0 then r, the same slopes.
    Accuracy (training, no evaluation) 0.3 + a_s k under plain PPO, a_s = -0.010, -0.012, -0.014, and 0.3 at
    every dose under the decoupled objective: its slope minus plain PPO's is +0.012 on average, sd 0.002,
    t = 0.012 / (0.002 / sqrt 3) = 10.39."""
    from launch.experiments.science.findings import finding
    from launch.experiments.science.report import dose_statistics, evaluate

    lag = finding("lag")
    plain, decoupled = lag.arms[:5], lag.arms[5:]
    assert [(a.preset, a.skip_steps) for a in plain] == [(f"fixedlag_{k}", 8) for k in (0, 1, 2, 4, 8)]
    assert [(a.preset, a.skip_steps) for a in decoupled] == [(f"fixedlag_{k}", 8) for k in (0, 1, 2, 4, 8)]
    assert all("decoupled" in a.overrides and "recompute" in a.overrides for a in decoupled)

    def run(k: int, r: float, accuracy: float) -> list[dict]:
        e = [5.0 if s < 8 else 1.0 if s == 8 else r for s in range(10)]
        probes = [{"step": 0, "probe/entropy": 0.5}, {"step": 9, "probe/entropy": 0.5 * r}]
        return _rows("entropy/mean", e, **{"reward/accuracy": accuracy}) + probes

    c, a = [0.05, 0.04, 0.06], [-0.010, -0.012, -0.014]
    by_arm = {arm.name: [run(k, 1 - cs * k, 0.3 + a_s * k) for cs, a_s in zip(c, a)] for arm, k in zip(plain, LAG)}
    by_arm |= {arm.name: [run(k, 1 - cs * k, 0.3) for cs in c] for arm, k in zip(decoupled, LAG)}
    ratio, accuracy, flattened, ratio_decoupled = evaluate(lag, by_arm)
    assert dose_statistics(lag, lag.checks[0], by_arm)[4] == pytest.approx([1 - 0.4, 1 - 0.32, 1 - 0.48])
    assert ratio.verdict.b == pytest.approx([-0.05, -0.04, -0.06])
    # mean -0.05, sd 0.01, se 0.01/sqrt(3) = 0.0057735, t = -8.660, half-width 4.303 * se = 0.024843
    assert ratio.verdict.effect == pytest.approx(-0.05) and ratio.verdict.t == pytest.approx(-8.660, abs=1e-3)
    assert ratio.verdict.half_width == pytest.approx(0.024843, abs=1e-6) and ratio.verdict.verdict == "agrees"
    assert ratio.statistic == "probe_entropy_ratio" and ratio.learner_side.b == pytest.approx([-0.05, -0.04, -0.06])
    assert "learner side (entropy_ratio, not judged in the family): agrees, effect -0.0500" in ratio.line()
    assert accuracy.verdict.b == pytest.approx(a) and accuracy.verdict.verdict == "agrees"
    assert flattened.arm_a == "slope over " + ", ".join(arm.name for arm in plain)
    assert flattened.verdict.a == pytest.approx(a) and flattened.verdict.b == pytest.approx([0.0] * 3, abs=1e-12)
    assert flattened.verdict.effect == pytest.approx(0.012) and flattened.verdict.t == pytest.approx(10.392, abs=1e-3)
    assert flattened.verdict.verdict == "agrees"
    assert ratio_decoupled.verdict.b == pytest.approx([-0.05, -0.04, -0.06])


LAG = (0, 1, 2, 4, 8)


def test_every_check_states_what_the_paper_reports(tmp_path):
    """Each verdict row carries the paper's direction (the same as the check's expectation) and size."""
    import csv

    from launch.experiments.science.findings import FINDINGS
    from launch.experiments.science.report import evaluate, write_csv

    for f in FINDINGS:
        for c in f.checks:
            assert c.paper.startswith(c.expect.replace("_", " ")), (f.key, c.claim, c.paper)
    f = next(f for f in FINDINGS if f.key == "reuse")
    by_arm = {a.name: [_rows("entropy/mean", [0.5, 0.5, 0.4, 0.4, 0.4])] * 2 for a in f.arms}
    row, *rest = csv.DictReader(open(write_csv(evaluate(f, by_arm), tmp_path / "r.csv")))   # entropy, ...
    assert row["paper"] == f.checks[0].paper and row["expect"] == "lower"
    decisions = rest[-1]                                   # no entropy split in these rows: no verdict
    assert decisions["statistic"] == "decision_entropy_ratio" and decisions["verdict"] == "inconclusive"


def test_seeds_for_the_target_half_width():
    """sd 0.086 over 2 seeds (the routes world's reuse subset): t(n-1) * 0.086 / sqrt(n) <= 0.05 first at
    n = 14 (t(12) = 2.179 -> 0.0520 at 13; t(13) = 2.160 -> 0.0496 at 14)."""
    v = judge([0.955, 0.961], [0.955 - 0.0172, 0.961 - 0.0172 - 0.0860966 * math.sqrt(2)], "lower")
    assert v.spread == pytest.approx(0.0860966, rel=1e-4)
    assert v.seeds_for(0.05) == 14
    assert "about 14 seeds" in v.line()
    # sd 0.01: 12.706 * 0.01 / sqrt(2) = 0.090 at 2 seeds, 4.303 * 0.01 / sqrt(3) = 0.025 at 3
    assert judge([1.0, 1.0, 1.0], [0.9, 0.91, 0.89], "lower").seeds_for(0.05) == 3


def test_t95_beyond_ten_degrees_of_freedom():
    """Student's t, not the normal 1.96, from 11 degrees of freedom on (published quantiles)."""
    from launch.experiments.science.verdict import t95

    for dof, exact in ((11, 2.201), (13, 2.160), (20, 2.086), (30, 2.042), (40, 2.021), (60, 2.000),
                       (120, 1.980)):
        assert t95(dof) == pytest.approx(exact, abs=1e-3), dof


def test_seeds_per_finding_on_the_command_line():
    from launch.experiments.science.__main__ import parse_seeds

    keys = ["reuse", "lag"]
    assert parse_seeds(["5", "reuse=10"], keys) == (5, {"reuse": 10})
    assert parse_seeds(["lag=4"], keys) == (3, {"lag": 4})            # the default stays 3
    for bad in (["reuse=0"], ["five"], ["typo=4"]):
        with pytest.raises(SystemExit, match="FINDING=N"):
            parse_seeds(bad, keys)


def _split(direction: float, form: float, share: tuple[float, float] = (0.015, 0.06)) -> dict:
    """An entropy_sources split with only what decision entropy reads set by hand."""
    from launch.worlds.routes.entropy_sources import CLASSES

    split = {c: {"tokens": 0.1, "entropy": 0.1, "mean": 5.0} for c in CLASSES}    # never read
    split["direction"] = {"tokens": share[0], "entropy": 0.0, "mean": direction}
    split["form"] = {"tokens": share[1], "entropy": 0.0, "mean": form}
    return split


def test_decision_entropy_ratio_by_hand():
    """Token-weighted over direction and form only: start (0.015 * 0.75 + 0.06 * 0.85) / 0.075 = 0.83,
    end (0.015 * 0.25 + 0.06 * 0.45) / 0.075 = 0.41: ratio 0.41 / 0.83."""
    from launch.experiments.science.verdict import decision_entropy_ratio, statistic
    from launch.worlds.routes.entropy_sources import decision_entropy

    start, end = _split(0.75, 0.85), _split(0.25, 0.45)
    assert decision_entropy(start) == pytest.approx(0.83) and decision_entropy(end) == pytest.approx(0.41)
    rows = _rows("entropy/mean", [0.5, 0.5, 0.4]) + [{"step": 2, "entropy_sources/splits": [start, end]}]
    assert decision_entropy_ratio(rows) == pytest.approx(0.41 / 0.83)
    assert statistic("decision_entropy_ratio", rows, skip_steps=1) == pytest.approx(0.41 / 0.83)
    assert entropy_ratio(rows) == pytest.approx(0.4 / 0.5)            # the split row leaves the others alone
    assert math.isnan(decision_entropy_ratio(_rows("entropy/mean", [0.5, 0.4])))      # not measured


def test_the_reuse_finding_keeps_its_final_weights_in_the_routes_world_only():
    from launch.experiments.science.__main__ import fair_overrides
    from launch.experiments.science.findings import finding
    from launch.experiments.science.runner import spec_for, splits_entropy

    reuse, temperature = finding("reuse"), finding("temperature")
    fair = fair_overrides([reuse, temperature], "routes", 20)
    assert fair["reuse"][-2:] == ("--learner.checkpoint_every", "20")
    assert "--learner.checkpoint_every" not in fair["temperature"]
    assert "--learner.checkpoint_every" not in fair_overrides([reuse], "tiny", 20)["reuse"]
    assert "--learner.checkpoint_every" not in fair_overrides([reuse], None, 20)["reuse"]    # its own: slips
    f = replace(reuse, overrides=fair["reuse"])
    assert splits_entropy(spec_for(f, f.arms[1], 0, 20, "routes"))
    assert not splits_entropy(spec_for(f, f.arms[1], 0, 20, "tiny"))


def test_a_seed_estimate_only_where_the_half_width_target_means_something():
    """± 0.05 is the target on the entropy ratio (and nats, accuracy, rates); a length in tokens has none."""
    from launch.experiments.science.verdict import power_target

    # d = [0.30, 0.34, 0.38]: mean 0.34, sd 0.04, half-width 4.303 * 0.04 / sqrt(3) = 0.0994 > 0.05;
    # 4 seeds: 3.182 * 0.04 / 2 = 0.0636, 5 seeds: 2.776 * 0.04 / sqrt(5) = 0.0497 <= 0.05
    v = judge([0.0, 0.0, 0.0], [0.30, 0.34, 0.38], "higher")
    assert power_target("length_growth") is None and power_target("entropy_ratio") == 0.05
    assert power_target("uncut_length_growth") is None and power_target("tokens_total") is None
    assert power_target("pass16_final") == 0.05
    assert v.line(power_target("length_growth")).endswith("(sd 0.0400 over 3 seeds, t = +14.72)")
    assert v.line(power_target("entropy_ratio")).endswith(
        "; wider than ± 0.05: about 5 seeds at this spread would reach it")


def test_p_values_of_the_paired_t_test_match_the_t_table():
    """At the table's two-sided 95% quantiles p is 0.05; t = 1 with 5 degrees of freedom: p = 0.3632
    (exact: 2 * (1 - F_5(1))); t = 0: p = 1; an infinite t (no spread): p = 0."""
    from launch.experiments.science.verdict import T95, t_two_sided_p

    for dof in (1, 2, 3, 4, 10, 30):
        assert t_two_sided_p(T95[dof], dof) == pytest.approx(0.05, abs=2e-4)
        assert t_two_sided_p(-T95[dof], dof) == t_two_sided_p(T95[dof], dof)
    assert t_two_sided_p(1.0, 5) == pytest.approx(0.36322, abs=1e-5)
    assert t_two_sided_p(0.0, 3) == 1.0 and t_two_sided_p(math.inf, 3) == 0.0
    # the Verdict's p: d = [0.30, 0.34, 0.38], t = +14.72 on 2 dof: p = 0.00458
    assert judge([0.0] * 3, [0.30, 0.34, 0.38], "higher").p == pytest.approx(0.00458, abs=5e-5)
    assert math.isnan(judge([0.0], [0.3], "higher").p)


def test_holm_bonferroni_by_hand():
    """p = (0.01, 0.04, 0.03, 0.005), m = 4, in increasing order: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06,
    0.04*1 = 0.04 -> 0.06 (monotone); a check not measured (NaN) is out of the family."""
    from launch.experiments.science.verdict import holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    got = holm([0.01, math.nan, 0.04])
    assert got[0] == pytest.approx(0.02) and math.isnan(got[1]) and got[2] == pytest.approx(0.04)
    assert holm([0.6, 0.9]) == [1.0, 1.0]          # capped at 1


def test_the_report_adjusts_every_check_and_marks_shared_references():
    """Three checks, two of them (reuse, clip_higher) against the same on-policy runs: the raw verdicts
    agree at p 0.0046 / 0.035 (t 5.20) / 0.040 (t 4.82); Holm over the family of 3 keeps the first
    (3 * 0.0046 = 0.0137) and makes the others inconclusive (2 * 0.035 = 0.070, then max(0.070, 0.040))."""
    from launch.experiments.science.findings import finding
    from launch.experiments.science.report import CheckResult, correct_for_checks

    def check(key, arm_a, b):
        return CheckResult(finding(key), "claim", "entropy_ratio", arm_a, "b", "higher", "", judge([0.0] * 3, b, "higher"))

    strong = [0.30, 0.34, 0.38]                       # t 14.72, p 0.00458
    results = [check("reuse", "on-policy (1, D, D)", strong), check("clip_higher", "on-policy (1, D, D)", [0.2, 0.3, 0.4]),
               check("temperature", "τ 1.0", [0.2, 0.3, 0.42])]
    ps = [r.verdict.p for r in results]
    assert ps[0] < 0.05 / 3 and 0.025 < min(ps[1:]) and max(ps[1:]) < 0.05
    assert [r.verdict.verdict for r in results] == ["agrees"] * 3
    runs = {("reuse", "on-policy (1, D, D)"): "reuse1_dr64_dt64-s0-aa", ("clip_higher", "on-policy (1, D, D)"):
            "reuse1_dr64_dt64-s0-aa", ("temperature", "τ 1.0"): "temp_1-s0-bb"}
    correct_for_checks(results, runs)
    assert results[0].p_holm == pytest.approx(3 * ps[0]) and results[0].verdict_holm == "agrees"
    assert [r.verdict_holm for r in results[1:]] == ["inconclusive", "inconclusive"]
    assert results[1].p_holm == pytest.approx(2 * ps[1]) == results[2].p_holm
    assert results[0].shares_reference_with == ("clip_higher",) and results[1].shares_reference_with == ("reuse",)
    assert results[2].shares_reference_with == ()


def test_differ_and_not_lower_by_hand():
    """d = [0.30, 0.34, 0.38]: t +14.72 > 4.303. 'differ' agrees whichever the sign and never disagrees;
    d = [0.2, -0.1, 0.05] (t +0.52) leaves it inconclusive. 'not_lower' (margin 0.05) shifts the null to
    -0.05: d = [-0.02, -0.01, -0.03], mean -0.02, sd 0.01, (mean + 0.05) / (0.01 / sqrt 3) = +5.196 > 4.303:
    agrees although the effect is negative; d = [-0.10, -0.11, -0.09] gives -8.660: disagrees;
    d = [-0.02, -0.10, 0.04] (mean -0.0267, sd 0.0702, t_null +0.58) is inconclusive."""
    zero = [0.0] * 3
    assert judge(zero, [0.30, 0.34, 0.38], "differ").verdict == "agrees"
    assert judge(zero, [-0.30, -0.34, -0.38], "differ").verdict == "agrees"
    assert judge(zero, [0.2, -0.1, 0.05], "differ").verdict == "inconclusive"
    v = judge(zero, [-0.02, -0.01, -0.03], "not_lower")
    assert v.verdict == "agrees" and v.effect == pytest.approx(-0.02) and v.margin == 0.05
    assert v.t == pytest.approx(-3.464, abs=1e-3)                          # the effect's own t, as printed
    assert v.p == pytest.approx(t_two_sided_p(5.196, 2), abs=1e-4) and v.p < 0.05     # the p of the shifted null
    assert "judged against -0.05" in v.line()
    assert judge(zero, [-0.10, -0.11, -0.09], "not_lower").verdict == "disagrees"
    assert judge(zero, [-0.02, -0.10, 0.04], "not_lower").verdict == "inconclusive"
    assert judge(zero, [0.30, 0.34, 0.38], "higher").margin == 0.0


def test_slope_against_a_reference_curve_pairs_seeds():
    """Doses 0, 1, 2. Seed 0: slope 0.0 against the reference's -0.1; seed 1: -0.02 against -0.12; seed 2 only
    in the reference (unpaired, left out). Differences +0.10, +0.10: sd 0, t = +inf, agrees 'higher'."""
    from launch.experiments.science.verdict import judge_slope

    checked = [[0.5, 0.5], [0.5, 0.48], [0.5, 0.46]]              # [dose][seed]
    reference = ([0, 1, 2], [[0.5, 0.5, 0.5], [0.4, 0.38, 0.4], [0.3, 0.26, 0.3]])
    v = judge_slope([0, 1, 2], checked, "higher", reference=reference)
    assert v.b == pytest.approx([0.0, -0.02, math.nan], nan_ok=True)
    assert v.a == pytest.approx([-0.1, -0.12, -0.1])
    assert (v.n, v.effect, v.verdict) == (2, pytest.approx(0.1), "agrees")
    assert judge_slope([0, 1, 2], checked, "lower").b == pytest.approx([0.0, -0.02])      # against 0 as before


def test_the_report_draws_the_probe_from_the_evaluation_rows():
    """The probe lives in evaluation rows (no ``updates``), the learner's entropy in step rows: each panel reads
    its own, seeds averaged where every seed has the step (the probe panel was empty when both read step rows)."""
    from launch.experiments.science.report import seed_band

    def run(probe_end: float) -> list[dict]:
        steps = [{"step": s, "updates": 1, "entropy/mean": 0.4 - 0.1 * s} for s in range(3)]
        return steps + [{"step": 0, "probe/entropy": 0.5}, {"step": 3, "probe/entropy": probe_end}]

    runs = [run(0.3), run(0.2), None]
    steps, mean, lo, hi = seed_band(runs, "probe/entropy")
    assert steps.tolist() == [0, 3] and mean == pytest.approx([0.5, 0.25]) and (lo[1], hi[1]) == (0.2, 0.3)
    steps, mean, *_ = seed_band(runs, "entropy/mean")
    assert steps.tolist() == [0, 1, 2] and mean == pytest.approx([0.4, 0.3, 0.2])
