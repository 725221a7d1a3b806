"""Trackers on a real run: one 3-step tiny run (real Ray, vLLM, Redis, DeepSpeed; shared with test_stages.py) with
``--tracking tensorboard,wandb,mlflow`` (W&B offline, MLflow's local file store), then each tracker's
own reader against ``metrics.jsonl`` / ``evals.jsonl``: every numeric value of every row, under the
same name at the same step, and the resolved config as the run's hyperparameters. Then (slow, ~2 min)
the driver resumes the run from its checkpoint for one more step: every tracker continues the same
run. (The same resume with the backends alone: tests/unit/test_run_tracking.py.)"""

from __future__ import annotations

import json
import os

import pytest

from launch.run.tracking import mlflow_name
from tests.integration.harness import TRACKED_RUN_ARGV, TRACKED_RUN_ID
from tests.tracker_readers import (
    mlflow_run,
    mlflow_scalars,
    same,
    tensorboard_hparams,
    tensorboard_scalars,
    wandb_offline_runs,
)

pytestmark = pytest.mark.integration

RUN_ID = TRACKED_RUN_ID      # the run: tests/integration/conftest.py (tracked_run), shared with test_stages.py


def _expected(rows: list[dict], evals: list[dict]) -> dict[str, dict[int, float]]:
    """name -> {step: value} straight from the files: numbers under their key, a dict of numbers under
    key/subkey; an evaluation's step and version are its x value and its step row's."""
    out: dict[str, dict[int, float]] = {}
    for row, skip in [(r, {"step"}) for r in rows] + [(e, {"step", "version"}) for e in evals]:
        for key, value in row.items():
            if key in skip or isinstance(value, (str, list)) or value is None:
                continue
            items = value.items() if isinstance(value, dict) else [("", value)]
            for sub, v in items:
                if isinstance(v, (int, float)):
                    out.setdefault(f"{key}/{sub}" if sub else key, {})[row["step"]] = float(v)
    return out


def _assert_equal(got: dict[str, dict[int, float]], want: dict[str, dict[int, float]], who: str) -> None:
    assert set(got) >= set(want), f"{who} lacks {sorted(set(want) - set(got))}"
    for name, by_step in want.items():
        assert got[name].keys() == by_step.keys(), (who, name, got[name], by_step)
        bad = {s: (got[name][s], v) for s, v in by_step.items() if not same(got[name][s], v)}
        assert not bad, f"{who}: {name} differs at steps {bad}"


def test_tensorboard_events_equal_the_jsonl(tracked_run):
    run_path, rows, evals, cfg = tracked_run
    want = _expected(rows, evals)
    assert {"reward/mean", "entropy/mean", "lag/hist/0", "eval/avg@n", "eval/pass@1"} <= set(want)
    _assert_equal(tensorboard_scalars(run_path / "tb"), want, "tensorboard")
    hp = tensorboard_hparams(run_path / "tb")
    assert hp["run_id"] == RUN_ID and hp["learner.lr"] == pytest.approx(cfg.learner.lr)
    assert hp["tracking.backends"] == '["tensorboard", "wandb", "mlflow"]'


def test_mlflow_store_equals_the_jsonl(tracked_run):
    run_path, rows, evals, cfg = tracked_run
    client, runs = mlflow_run(f"file:{run_path.parent / 'mlruns'}", "lagrl", RUN_ID)
    assert len(runs) == 1 and runs[0].info.run_name == RUN_ID and runs[0].info.status == "FINISHED"
    want = {mlflow_name(k): v for k, v in _expected(rows, evals).items()}
    _assert_equal(mlflow_scalars(client, runs[0].info.run_id), want, "mlflow")
    params = runs[0].data.params
    assert params["run_id"] == RUN_ID and float(params["learner.lr"]) == pytest.approx(cfg.learner.lr)
    assert params["group_size"] == str(cfg.group_size)


def test_wandb_offline_files_equal_the_jsonl(tracked_run):
    run_path, rows, evals, cfg = tracked_run
    (wb,) = wandb_offline_runs(run_path / "wandb")
    assert (wb["id"], wb["name"], wb["project"]) == (RUN_ID, RUN_ID, "lagrl")
    assert wb["config"]["learner"]["lr"] == pytest.approx(cfg.learner.lr) and wb["config"]["run_id"] == RUN_ID
    got: dict[str, dict[int, float]] = {}
    for h in wb["history"]:
        for k, v in h.items():
            if k != "step" and isinstance(v, (int, float)):
                got.setdefault(k, {})[h["step"]] = float(v)
    _assert_equal(got, _expected(rows, evals), "wandb")
    assert wb["summary"]["summary/steps"] == 3


@pytest.mark.slow   # a second driver start (~2 min): the resume path of every tracker through the driver
def test_a_resumed_run_continues_the_same_tracker_runs(tracked_run_record):
    from launch.run.compose import build_config
    from launch.run.driver import run

    t = tracked_run_record
    run_path, rows = t.run_path, t.rows
    os.environ["WANDB_MODE"] = "offline"
    try:
        again, _ = build_config([*TRACKED_RUN_ARGV, "--buffer.redis_url", t.redis_url, "--steps", "4",
                                 "--run_dir", str(run_path.parent)], "multistage")
        run(again)
    finally:
        os.environ.pop("WANDB_MODE", None)
    read = lambda name: [json.loads(line) for line in (run_path / name).read_text().splitlines()]  # noqa: E731
    rows4 = read("metrics.jsonl")
    assert [r["step"] for r in rows4] == [0, 1, 2, 3], "the learner resumed from its step-3 checkpoint"
    assert rows4[:3] == rows, "the first three steps were not retrained"
    tb = tensorboard_scalars(run_path / "tb")
    _assert_equal({k: v for k, v in tb.items() if not k.startswith("eval/")}, _expected(rows4, []),
                  "tensorboard after the resume")
    client, runs = mlflow_run(f"file:{run_path.parent / 'mlruns'}", "lagrl", RUN_ID)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert set(mlflow_scalars(client, runs[0].info.run_id)["reward/mean"]) == {0, 1, 2, 3}
    wb = wandb_offline_runs(run_path / "wandb")
    assert [(r["id"], r["name"]) for r in wb] == [(RUN_ID, RUN_ID)] * 2
    assert [h["step"] for h in wb[1]["history"] if "reward/mean" in h] == [3]
