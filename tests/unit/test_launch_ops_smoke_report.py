"""The smoke command fits the window of a lent GPU host: the JSON after every stage, $OUT for the summary
but never for the scratch (stage 6's multi-GB model), and --budget-s skipping what no longer fits."""

from __future__ import annotations

import json
from pathlib import Path

from launch.ops.smoke.__main__ import EXPECTED, main, output_paths
from launch.ops.smoke.report import Report


def test_the_summary_follows_out_and_the_scratch_stays_outside_it(tmp_path):
    out, work = output_paths(None, None, {"OUT": str(tmp_path / "out")})
    assert out == tmp_path / "out" / "smoke.json"
    assert not str(work).startswith(str(tmp_path / "out"))          # the 3 GB model never comes back
    out, work = output_paths(None, None, {})
    assert out.parts[0] == "runs" and work == out.parent / "work"
    assert output_paths(tmp_path / "s.json", tmp_path / "w", {"OUT": "/elsewhere"}) == (tmp_path / "s.json", tmp_path / "w")


def test_the_json_is_written_after_every_stage(tmp_path):
    out = tmp_path / "smoke.json"
    report = Report("cpu", out, budget_s=60)
    report.run(1, "first", lambda: {"line": "fine", "x": 1}, 10)
    assert json.loads(out.read_text())["stages"]["1_first"]["status"] == "PASS"      # before the second starts
    report.run(2, "second", lambda: 1 / 0, 10)
    stages = json.loads(out.read_text())["stages"]
    assert stages["2_second"]["status"] == "FAIL" and "ZeroDivisionError" in stages["2_second"]["error"]
    report.skip(3, "third", "no time")
    assert json.loads(out.read_text())["stages"]["3_third"] == {"status": "SKIP", "why": "no time"}


def test_a_stage_that_no_longer_fits_the_budget_is_skipped(tmp_path):
    out = tmp_path / "smoke.json"
    budget = EXPECTED["cpu"][1] - 1                       # not even stage 1 fits: nothing starts
    rc = main(["--device", "cpu", "--stages", "1", "4", "--out", str(out), "--work", str(tmp_path / "w"),
               "--budget-s", str(budget)])
    stages = json.loads(out.read_text())["stages"]
    assert rc == 0 and set(stages) == {"1_versions", "4_learner"}
    assert all(s["status"] == "SKIP" and "--budget-s" in s["why"] for s in stages.values()), stages
