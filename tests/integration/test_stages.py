"""Multi-stage budgets through the driver, in the tiny world (its responses run 7 tokens, a few up to ~14, so a 7-token
stage cuts the longer ones): the stage index and budget change at the boundary step, and each step's
responses respect its stage's budget. The same in the reasoning world is slow (its build):
tests/integration/test_reasoning_world.py."""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import metrics_rows

pytestmark = pytest.mark.integration


def test_driver_runs_two_steps_across_a_stage_boundary(ray_local, tmp_path, tiny_world):
    from launch.cli import build_config
    from launch.run.driver import run

    stages = json.dumps([{"max_tokens": 7, "steps": 1}, {"max_tokens": 16}])
    cfg, _ = build_config(["--tiny", "--steps", "2", "--data.stages", stages, "--data.eval_max_problems", "8",
                           "--run_dir", str(tmp_path / "runs"), "--run_id", "stages-2"], default_preset="multistage")
    assert cfg.world == "tiny"
    result = run(cfg)
    rows = metrics_rows(result.run_path)
    assert [r["stage"] for r in rows] == [0.0, 1.0]
    assert rows[0]["length/max"] <= 7 and rows[0]["truncation/rate"] > 0       # the 7-token stage cuts the longer ones
    assert rows[1]["length/max"] <= 16
    assert all(0.0 <= r["reward/accuracy"] <= 1.0 for r in rows)
    assert len(result.evals) == 2 and all(e["eval/problems"] == 8 for e in result.evals)
