"""The end-of-run summary: build_summary's figures and the lines format_summary prints for them; a
run's rows read back from its directory (read_run_rows: compare and the science report read them)."""

import json
from pathlib import Path

from launch.run.summary import (
    build_summary,
    format_summary,
    read_evals,
    read_metrics,
    read_run_rows,
    summary_scalars,
)

RUN = Path("/runs/r1")
STEPS = [   # three learner steps of made-up figures
    {"step": 0, "reward/accuracy": 0.25, "entropy/mean": 0.8, "length/mean": 40.0, "lag/mean": 0.5, "lag/max": 1,
     "groups/trained": 4, "groups/zero_adv_dropped": 1, "groups/stale_dropped": 0, "lag/stale_dropped": 0},
    {"step": 1, "reward/accuracy": 0.5, "entropy/mean": 0.7, "length/mean": 45.0, "lag/mean": 1.0, "lag/max": 2,
     "groups/trained": 4, "groups/zero_adv_dropped": 2, "groups/stale_dropped": 1, "lag/stale_dropped": 2},
    {"step": 2, "reward/accuracy": 0.75, "entropy/mean": 0.6, "length/mean": 52.5, "lag/mean": 1.5, "lag/max": 3,
     "groups/trained": 3, "groups/zero_adv_dropped": 0, "groups/stale_dropped": 2, "lag/stale_dropped": 5},
]
EVALS = [{"step": 0, "eval/avg@n": 0.125, "eval/n": 4, "eval/problems": 32},
         {"step": 3, "eval/avg@n": 0.375, "eval/n": 4, "eval/problems": 32}]


def _summary(evals: list[dict]) -> dict:
    return build_summary(run_id="r1", preset="onpolicy", run_path=RUN, steps_total=5, seconds=125.4,
                         rows=STEPS, evals=evals, stop_reason="max_wall_s=120 reached",
                         startup={"ray": 6.0, "learner": 25.0})


def test_every_field_is_printed_with_its_figures():
    assert format_summary(_summary(EVALS)).splitlines() == [
        "run r1 (onpolicy): 3/5 steps in 2 min 5 s (max_wall_s=120 reached)",       # 125.4 s
        "  accuracy      0.125 -> 0.375 (avg@4 on 32 held-out problems)",           # first and last eval
        "  train reward  accuracy 0.250 -> 0.750, response length 40.0 -> 52.5 tokens",
        "  entropy       0.800 -> 0.600",
        "  policy lag    mean 1.00, max 3",                                          # (0.5 + 1 + 1.5) / 3
        "  groups        11 trained, 3 zero-advantage dropped, 3 stale dropped (7 stale responses)",
        "  files         /runs/r1/ (config.json, metrics.jsonl, summary.json, checkpoints/, logs/, redis/)",
        "  notebook      LAGRL_RUN_DIR=/runs/r1 jupyter notebook notebooks/monitor.ipynb",
    ]


def test_the_dict_holds_the_same_figures():
    s = _summary(EVALS)
    assert (s["steps"], s["steps_total"], s["seconds"]) == (3, 5, 125.4)
    assert s["accuracy"] == [0.125, 0.375] and (s["eval_n"], s["eval_problems"]) == (4, 32)
    assert s["entropy"] == [0.8, 0.6] and (s["lag_mean"], s["lag_max"]) == (1.0, 3)
    assert s["groups"] == {"trained": 11, "zero_advantage_dropped": 3, "stale_dropped": 3,
                           "stale_responses_dropped": 7}
    assert s["files"]["metrics.jsonl"] == "/runs/r1/metrics.jsonl" and s["guard"] is None and s["prime"] is None
    assert s["startup_seconds"] == {"ray": 6.0, "learner": 25.0}


def test_the_trackers_get_the_summary_as_numbers():
    assert summary_scalars(_summary(EVALS)) == {
        "steps": 3.0, "seconds": 125.4, "accuracy/first": 0.125, "accuracy/last": 0.375,
        "train_accuracy/first": 0.25, "train_accuracy/last": 0.75, "entropy/first": 0.8, "entropy/last": 0.6,
        "length/first": 40.0, "length/last": 52.5, "lag_mean": 1.0, "lag_max": 3.0, "groups/trained": 11.0,
        "groups/zero_advantage_dropped": 3.0, "groups/stale_dropped": 3.0, "groups/stale_responses_dropped": 7.0}
    assert "accuracy/first" not in summary_scalars(_summary([]))


def test_a_run_without_evaluation_says_so():
    s = _summary([])
    assert s["accuracy"] is None and s["eval_n"] is None
    assert "  accuracy      - (no evaluation)" in format_summary(s).splitlines()


def _run_dir(tmp_path: Path, rows: list[dict], evals: list[dict] | None) -> Path:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "entr')
    if evals is not None:
        (tmp_path / "summary.json").write_text(json.dumps({"run_id": "r1", "evals": evals}))
    return tmp_path / "metrics.jsonl"


def test_read_run_rows_one_row_per_step_then_the_evaluations(tmp_path: Path):
    retrained = {**STEPS[1], "reward/accuracy": 0.55}          # step 1 again after a resume: this row wins
    path = _run_dir(tmp_path, [STEPS[0], STEPS[1], STEPS[2], retrained], EVALS)
    rows = read_run_rows(path)                                  # the torn last line is skipped
    assert rows == [STEPS[0], retrained, STEPS[2], *EVALS]
    assert read_metrics(path) == [STEPS[0], retrained, STEPS[2]]


def test_read_run_rows_without_a_summary_or_with_evaluations_in_the_file(tmp_path: Path):
    assert read_run_rows(_run_dir(tmp_path, STEPS, None)) == STEPS              # still running: no summary yet
    in_file = [STEPS[0], EVALS[0], STEPS[1], STEPS[2]]
    rows = read_run_rows(_run_dir(tmp_path, in_file, [{"step": 9, "eval/avg@n": 1.0}]))
    assert rows == [STEPS[0], EVALS[0], STEPS[1], STEPS[2]]     # the file's own, kept beside step 0's row


def test_rows_appended_as_the_driver_does_read_back(tmp_path: Path):
    import numpy as np

    from rewards.problems import append_jsonl

    path = tmp_path / "metrics.jsonl"
    for row in STEPS:
        append_jsonl({**row, "entropy/mean": np.float32(row["entropy/mean"])}, path)   # numpy scalars: floats
    rows = read_metrics(path)
    assert [r["step"] for r in rows] == [0, 1, 2] and list(rows[0]) == list(STEPS[0])  # the row's key order
    assert [r["entropy/mean"] for r in rows] == [float(np.float32(x)) for x in (0.8, 0.7, 0.6)]


def test_the_science_report_reads_the_same_rows(tmp_path: Path):
    from launch.experiments.science.runner import ENTROPY_SOURCES, read_rows

    _run_dir(tmp_path, STEPS, EVALS)
    assert read_rows(tmp_path) == read_run_rows(tmp_path / "metrics.jsonl") == [*STEPS, *EVALS]
    # a measured entropy split (start, end) comes as one more row, at the last step
    (tmp_path / ENTROPY_SOURCES).write_text(json.dumps({"seed": 0, "models": ["a", "b"], "splits": [{"x": 1}, {"x": 2}]}))
    assert read_rows(tmp_path)[-1] == {"step": 3, "entropy_sources/splits": [{"x": 1}, {"x": 2}]}


def test_evaluations_of_every_incarnation_are_read_back_from_evals_jsonl(tmp_path: Path):
    """A resumed run's summary keeps the evaluations of the incarnations before it (the driver appends
    each to evals.jsonl; summary.json is rewritten by the last incarnation)."""
    from rewards.problems import append_jsonl

    first, resumed_at_2 = {"step": 2, "eval/avg@n": 0.25}, {"step": 2, "eval/avg@n": 0.3}
    for row in (EVALS[0], first, resumed_at_2, EVALS[1]):        # killed after step 2's evaluation, resumed
        append_jsonl(row, tmp_path / "evals.jsonl")
    assert read_evals(tmp_path / "evals.jsonl") == [EVALS[0], resumed_at_2, EVALS[1]]
    path = _run_dir(tmp_path, STEPS, [EVALS[1]])                 # the last incarnation's summary: step 3 only
    assert read_run_rows(path) == [*STEPS, EVALS[0], resumed_at_2, EVALS[1]]
    assert read_evals(tmp_path / "missing.jsonl") == []
