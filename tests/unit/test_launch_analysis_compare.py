"""launch.experiments.analysis.compare: metrics JSONL -> comparison figure + long CSV; plots never crash on missing keys."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from launch.experiments.analysis import compare, plots  # noqa: E402
from rewards.problems import read_jsonl  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _rows(n: int, *, entropy0: float, with_eval: bool) -> list[dict]:
    rows = []
    for step in range(n):
        row = {"step": step, "version": step + 1, "mode": "off_policy", "entropy/mean": entropy0 - 0.01 * step,
               "entropy/coef": 1e-4 * step, "reward/accuracy": 0.2 + 0.05 * step,
               "lag/hist": {0: 10, 1: step}, "lag/mean": 0.5}
        if with_eval and step % 2 == 0:
            row["eval/accuracy"] = 0.3 + 0.01 * step
        rows.append(row)
    return rows


def _write_run(root: Path, name: str, rows: list[dict], preset: str | None = None) -> Path:
    run_dir = root / name
    run_dir.mkdir()
    path = run_dir / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 99, "entr')  # torn last line
    if preset:
        (run_dir / "config.json").write_text(json.dumps({"run_id": name, "preset": preset}))
    return path


def test_metrics_frame_and_long_format(tmp_path: Path):
    a = _write_run(tmp_path, "run-a", _rows(5, entropy0=0.5, with_eval=True), preset="onpolicy")
    b = _write_run(tmp_path, "run-b", _rows(3, entropy0=0.4, with_eval=False))
    frames = {compare.jsonl_label(p): compare.metrics_frame(read_jsonl(p, allow_torn_tail=True)) for p in (a, b)}
    assert list(frames) == ["run-a (onpolicy)", "run-b"]
    fa = frames["run-a (onpolicy)"]
    assert len(fa) == 5 and list(fa["step"]) == [0, 1, 2, 3, 4]   # the torn line is skipped
    assert "mode" not in compare.numeric_metrics(fa) and "lag/hist" not in compare.numeric_metrics(fa)

    long = compare.long_frame(frames)
    assert list(long.columns) == ["run", "step", "metric", "value"]
    # run-a: 5 steps x (version, entropy/mean, entropy/coef, reward/accuracy, lag/mean) + 3 eval points
    assert (long["run"] == "run-a (onpolicy)").sum() == 5 * 5 + 3
    assert (long["run"] == "run-b").sum() == 3 * 5
    ent = long[(long.run == "run-b") & (long.metric == "entropy/mean")]
    assert ent["value"].tolist() == pytest.approx([0.4, 0.39, 0.38])

    latest, total = plots.lag_hist(fa)
    assert latest == {0: 10.0, 1: 4.0}                          # JSON string keys are back to ints
    assert total == {0: 50.0, 1: 10.0}


def test_cli_writes_png_and_csv(tmp_path: Path):
    a = _write_run(tmp_path, "run-a", _rows(6, entropy0=0.5, with_eval=True), preset="onpolicy")
    b = _write_run(tmp_path, "run-b", _rows(4, entropy0=0.3, with_eval=False), preset="offpolicy_reuse4")
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "launch.experiments.analysis.compare", "--metrics-jsonl", str(a), str(b),
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    png, csv_path = out / "compare.png", out / "compare.csv"
    assert proc.stdout.split() == [str(png), str(csv_path)]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert {r["run"] for r in rows} == {"run-a (onpolicy)", "run-b (offpolicy_reuse4)"}
    acc = [(int(float(r["step"])), float(r["value"])) for r in rows
           if r["run"] == "run-b (offpolicy_reuse4)" and r["metric"] == "reward/accuracy"]
    assert [s for s, _ in acc] == [0, 1, 2, 3]
    assert [v for _, v in acc] == pytest.approx([0.2, 0.25, 0.3, 0.35])
    assert sum(r["metric"] == "eval/accuracy" for r in rows) == 3
    from PIL import Image

    from tests.tracker_readers import tensorboard_images      # the figure also went to TensorBoard (default)
    assert tensorboard_images(out / "tb") == {"compare": [(0, *Image.open(png).size)]}


def test_cli_writes_the_figures_to_wandb_and_mlflow(tmp_path: Path):
    import os

    from tests.tracker_readers import mlflow_run, wandb_offline_runs

    a = _write_run(tmp_path, "run-a", _rows(4, entropy0=0.5, with_eval=True), preset="onpolicy")
    out = tmp_path / "cmp"
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-m", "launch.experiments.analysis.compare", "--metrics-jsonl", str(a), "--out", str(out),
                           "--tracking", "wandb,mlflow", "--run-name", "cmp-1"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "tb").exists()
    client, runs = mlflow_run(f"file:{out / 'mlruns'}", "lagrl", "cmp-1")
    artifacts = client.list_artifacts(runs[0].info.run_id, "figures/compare")
    assert [x.path for x in artifacts] == ["figures/compare/compare.png"]
    (wb,) = wandb_offline_runs(out / "wandb")
    assert wb["name"] == "cmp-1" and any(h.get("compare/_type") == "image-file" for h in wb["history"])
    assert list((out / "wandb").glob("offline-run-*/files/media/images/compare_*.png"))


def test_cli_names_a_missing_file(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "launch.experiments.analysis.compare", "--metrics-jsonl",
                           str(tmp_path / "nope" / "metrics.jsonl"), "--out", str(tmp_path / "cmp")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "metrics.jsonl: no such file" in proc.stderr, proc.stderr


def test_compare_figure_lines_per_run():
    frames = {"a": compare.metrics_frame(_rows(4, entropy0=0.5, with_eval=True)),
              "b": compare.metrics_frame(_rows(4, entropy0=0.3, with_eval=False))}
    fig = compare.plot_compare(frames)
    ent_ax, acc_ax = fig.axes
    assert [line.get_label() for line in ent_ax.get_lines()] == ["a", "b"]
    assert [line.get_label() for line in acc_ax.get_lines()] == ["a", "a: eval/accuracy", "b"]
    plt.close(fig)


def test_plots_tolerate_missing_metrics():
    """A run that logged almost nothing: every plot draws a note, returns 0, and never raises."""
    df = compare.metrics_frame([{"step": 0, "mode": "on_policy"}, {"step": 1, "reward/mean": None}])
    empty = compare.metrics_frame([])
    fig, axes = plt.subplots(2, 5)
    for frame, row in ((df, axes[0]), (empty, axes[1])):
        counts = [plots.plot_entropy(row[0], frame), plots.plot_reward(row[1], frame),
                  plots.plot_lag_hist(row[2], frame), plots.plot_clip(row[3], frame),
                  plots.plot_actor_throughput(row[4], {"a0": {"tokens_per_s": None}})]
        assert counts == [0, 0, 0, 0, 0]
    assert compare.long_frame({"x": empty}).empty
    plt.close(fig)


def test_actor_throughput_bars():
    fig, ax = plt.subplots()
    n = plots.plot_actor_throughput(ax, {"actor-1": {"tokens_per_s": 900.0, "version": 3, "time": 100.0},
                                           "actor-0": {"tokens_per_s": 1200.0, "version": 3, "time": 95.0}},
                                      now=101.0)
    assert n == 2
    assert [p.get_height() for p in ax.patches] == [1200.0, 900.0]
    plt.close(fig)


def test_guard_spans_are_the_runs_of_on_policy_steps():
    df = compare.metrics_frame([{"step": s, "guard/on_policy": float(on)}
                                for s, on in enumerate([0, 1, 1, 0, 0, 1, 0, 1])])
    assert plots.guard_spans(df) == [(1, 2), (5, 5), (7, 7)]
    assert plots.guard_spans(compare.metrics_frame([{"step": 0, "entropy/mean": 0.3}])) == []
    fig, ax = plt.subplots()
    assert plots.shade_guard(ax, df) == 3 and len(ax.patches) == 3
    plt.close(fig)


def test_stage_starts_and_the_entropy_target_are_drawn():
    rows = [{"step": s, "stage": float(s // 3), "entropy/mean": 0.3, "entropy/target": 0.2} for s in range(8)]
    df = compare.metrics_frame(rows)
    assert plots.stage_starts(df) == [3.0, 6.0]
    fig, ax = plt.subplots()
    assert plots.plot_entropy(ax, df) == 8
    labels = {line.get_label() for line in ax.get_lines()}
    assert {"entropy target", "entropy/mean", "stage start"} <= labels
    plt.close(fig)
