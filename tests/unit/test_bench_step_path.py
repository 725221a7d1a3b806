"""bench/step_path.py's figures from the learner's metrics rows: hop shares, generation efficiency, stale waste."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "step_path.py"
SPEC = importlib.util.spec_from_file_location("bench_step_path", BENCH)
sp = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sp)


def _row(step: int, gen_phase: float, stale: int) -> dict:
    return {"step": step, "time/step": 2.0, "path/trained": 2.0, "path/gen_phase": gen_phase,
            "path/seg/generate": gen_phase, "path/seg/train": 2.0 - gen_phase,
            "groups/read": 10, "lag/stale_dropped": stale}


def test_summary_of_steady_steps():
    rows = [_row(0, 1.9, 4), _row(1, 1.0, 0), _row(2, 1.2, 0), _row(3, 0.8, 2)]
    s = sp.summarize(rows, bare_s={1: 0.5, 2: 0.6, 3: 0.6}, group_size=4, skip=1)
    assert s["steps"] == 3 and s["gen_phase_s"] == pytest.approx(1.0) and s["bare_s"] == pytest.approx(0.6)
    assert s["efficiency"] == pytest.approx(0.5)                    # median of 0.5, 0.5, 0.75
    assert s["shares"]["generate"] == pytest.approx(0.5) and s["shares"]["train"] == pytest.approx(0.5)
    assert s["shares"]["publish"] == 0.0
    # stale over every step (warm-up included): 6 of 4 x 10 x 4 responses read
    assert (s["stale_responses"], s["responses_read"]) == (6, 160) and s["stale_waste"] == pytest.approx(6 / 160)

