"""launch.experiments.analysis.pass_at_k_plot: one pass@k curve per evaluated checkpoint; the compare CLI writes it."""

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

from launch.experiments.analysis import compare  # noqa: E402
from launch.experiments.analysis.pass_at_k_plot import pass_at_k_curves, plot_pass_at_k, write_pass_at_k  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _train_rows(n: int) -> list[dict]:
    return [{"step": s, "entropy/mean": 0.5 - 0.01 * s, "reward/accuracy": 0.2 + 0.05 * s} for s in range(n)]


def _eval_row(step: int, curve: dict[int, float]) -> dict:
    return {"step": step, "version": step, "eval/avg@n": curve[1], "eval/n": max(curve),
            **{f"eval/pass@{k}": v for k, v in curve.items()}}


CURVE_0 = {1: 0.25, 2: 0.4, 4: 0.6, 6: 0.7}
CURVE_3 = {1: 0.5, 2: 0.65, 4: 0.8, 6: 0.85}


def test_curves_from_a_metrics_frame():
    df = compare.metrics_frame(_train_rows(4) + [_eval_row(0, CURVE_0), _eval_row(3, CURVE_3)])
    curves = pass_at_k_curves(df)
    assert [step for step, _ in curves] == [0.0, 3.0]
    assert curves[0][1] == pytest.approx(CURVE_0) and curves[1][1] == pytest.approx(CURVE_3)
    assert list(curves[0][1]) == [1, 2, 4, 6]                 # sorted by k, not by column order
    assert pass_at_k_curves(compare.metrics_frame(_train_rows(3))) == []


def test_plot_one_curve_per_checkpoint_and_run():
    frames = {"a": compare.metrics_frame(_train_rows(4) + [_eval_row(0, CURVE_0), _eval_row(3, CURVE_3)]),
              "b": compare.metrics_frame([_eval_row(2, {1: 0.1, 2: 0.2})])}
    fig, ax = plt.subplots()
    assert plot_pass_at_k(ax, frames) == 3
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["a @ step 0", "a @ step 3", "b @ step 2"]
    assert list(lines[1].get_xdata()) == [1, 2, 4, 6] and list(lines[1].get_ydata()) == pytest.approx([0.5, 0.65, 0.8, 0.85])
    assert ax.get_xscale() == "log"
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()   # colour per run
    assert lines[0].get_alpha() < lines[1].get_alpha()                            # later checkpoint darker
    plt.close(fig)


def test_plot_and_writer_without_pass_at_k(tmp_path: Path):
    frames = {"a": compare.metrics_frame(_train_rows(3)), "empty": compare.metrics_frame([])}
    fig, ax = plt.subplots()
    assert plot_pass_at_k(ax, frames) == 0
    plt.close(fig)
    assert write_pass_at_k(frames, tmp_path) is None and not (tmp_path / "pass_at_k.png").exists()


def _run_dir(root: Path, name: str, evals: list[dict], evals_in_jsonl: bool = False) -> Path:
    run_dir = root / name
    run_dir.mkdir()
    rows = _train_rows(4) + (evals if evals_in_jsonl else [])
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "summary.json").write_text(json.dumps({"run_id": name, "evals": evals}))
    return run_dir / "metrics.jsonl"


def test_read_run_rows_takes_evals_from_summary_once(tmp_path: Path):
    from launch.run.summary import read_run_rows

    evals = [_eval_row(0, CURVE_0), _eval_row(3, CURVE_3)]
    from_summary = read_run_rows(_run_dir(tmp_path, "s", evals))
    assert len(from_summary) == 6 and from_summary[-1]["eval/pass@4"] == 0.8
    in_jsonl = read_run_rows(_run_dir(tmp_path, "j", evals, evals_in_jsonl=True))
    assert len(in_jsonl) == 6                                  # not read twice, nor merged with steps 0 and 3


def test_cli_writes_pass_at_k_png(tmp_path: Path):
    a = _run_dir(tmp_path, "run-a", [_eval_row(0, CURVE_0), _eval_row(3, CURVE_3)])
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "launch.experiments.analysis.compare", "--metrics-jsonl", str(a), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    png = out / "pass_at_k.png"
    assert proc.stdout.split() == [str(out / "compare.png"), str(out / "compare.csv"), str(png)]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    with open(out / "compare.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "eval/pass@4"]
    assert [(int(float(r["step"])), float(r["value"])) for r in rows] == [(0, 0.6), (3, 0.8)]
