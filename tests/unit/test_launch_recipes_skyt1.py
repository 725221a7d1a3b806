"""launch.recipes.skyt1: an RL stage is the ordinary entry script run as a process of its own through
launch.run.spec (the real chain runs in tests/integration/test_skyt1.py, marked slow)."""

from __future__ import annotations

import json
import subprocess

import pytest

import launch.recipes.skyt1.pipeline as pipeline


@pytest.fixture
def started(monkeypatch):
    """The specs the pipeline starts (nothing runs); a stage's record is its run path."""
    specs = []

    def fake_run_process(spec, run_dir, *, log=None, cwd=None):
        specs.append((spec, run_dir, cwd))
        return 0

    monkeypatch.setattr(pipeline, "run_process", fake_run_process)
    monkeypatch.setattr(pipeline, "rl_stage_record", lambda run_path: {"run_path": str(run_path)})
    return specs


def test_an_rl_stage_runs_the_preset_on_the_sft_model(tmp_path, started, capsys):
    record = pipeline.rl_stage("skyt1_prime", "out/sft1", tmp_path, "rl1-prime", True, "--data.eval_n 2")
    assert record == {"run_path": str(tmp_path / "rl1-prime")}
    [(spec, run_dir, cwd)] = started
    assert run_dir == tmp_path and cwd == pipeline.REPO
    assert spec.argv(tmp_path) == ["--preset", "skyt1_prime", "--tiny", "--run_dir", str(tmp_path),
                                   "--run_id", "rl1-prime", "--data.model_dir", "out/sft1", "--data.eval_n", "2"]
    cfg = spec.config(tmp_path)
    assert (cfg.preset, cfg.world, cfg.run_id, cfg.data.model_dir, cfg.data.eval_n) == \
        ("skyt1_prime", "tiny", "rl1-prime", "out/sft1", 2)
    assert "[pipeline] " in capsys.readouterr().out                   # the command, echoed (redacted)


def test_a_completed_stage_is_not_rerun_and_a_failed_one_stops_the_pipeline(tmp_path, started, monkeypatch):
    (tmp_path / "rl2-rloo").mkdir()
    (tmp_path / "rl2-rloo" / "summary.json").write_text(json.dumps({"stop_reason": "completed"}))
    pipeline.rl_stage("skyt1_rloo", "m", tmp_path, "rl2-rloo", False, "")
    assert started == []
    monkeypatch.setattr(pipeline, "run_process", lambda *a, **k: 3)
    with pytest.raises(subprocess.CalledProcessError) as exc:
        pipeline.rl_stage("skyt1_prime", "m", tmp_path, "rl1-prime", False, "")
    assert exc.value.returncode == 3 and "skyt1_prime" in exc.value.cmd
