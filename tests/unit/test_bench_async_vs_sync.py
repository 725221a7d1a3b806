"""bench/async_vs_sync.py's bound: max(generation, training) as the sync run measured them, by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "async_vs_sync.py"
SPEC = importlib.util.spec_from_file_location("bench_async_vs_sync", BENCH)
avs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(avs)


def test_bound_is_the_longer_of_generation_and_training():
    # sync: 15 steps, steady steps 1..14 take 1.7 s each = 1.0 s waiting for data + 0.6 s training (+ 0.1 s);
    # async: 1.25 s a steady step. Perfect overlap: max(1.0, 0.6) = 1.0 s, speedup 1.7; attained 1.0 / 1.25.
    sync = {"steady_wait_per_step_s": 1.0, "train_per_step_s": 0.6, "steady_s": 14 * 1.7, "steps": 15}
    bound = avs.async_bound(sync, {"steady_s": 14 * 1.25, "steps": 15})
    assert bound["bound_step_s"] == 1.0 and bound["sync_step_s"] == pytest.approx(1.7)
    assert bound["bound_speedup"] == pytest.approx(1.7) and bound["attained"] == pytest.approx(0.8)
    # training-bound: the bound is the training time
    sync = {"steady_wait_per_step_s": 0.3, "train_per_step_s": 0.9, "steady_s": 9 * 1.2, "steps": 10}
    assert avs.async_bound(sync, {"steady_s": 9 * 0.9, "steps": 10})["attained"] == pytest.approx(1.0)
