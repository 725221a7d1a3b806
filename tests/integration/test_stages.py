"""Multi-stage budgets through the driver, in the tiny world (its responses run 7 tokens, a few up to ~14, so a 7-token
stage cuts the longer ones): the stage index and budget change at the boundary step, and each step's
responses respect its stage's budget. The same in the reasoning world is slow (its build):
tests/integration/test_reasoning_world.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_driver_runs_steps_across_a_stage_boundary(tracked_run):
    """The shared tracked run (tests/integration/conftest.py): a 7-token stage for step 0, 16 tokens after."""
    run_path, rows, evals, cfg = tracked_run
    assert cfg.world == "tiny" and [s.max_tokens for s in cfg.data.stages] == [7, 16]
    assert [r["stage"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[0]["length/max"] <= 7 and rows[0]["truncation/rate"] > 0       # the 7-token stage cuts the longer ones
    assert all(r["length/max"] <= 16 for r in rows[1:])
    assert all(0.0 <= r["reward/accuracy"] <= 1.0 for r in rows)
    assert len(evals) == 2 and all(e["eval/problems"] == 16 for e in evals)
