"""launch.run.tracking: the names and values a tracker gets, the config flag, and a resume that
continues the same tracker run, read back with each tracker's own reader (real TensorBoard, W&B
offline and an MLflow file store; no network)."""

from __future__ import annotations

import importlib.util
import time

import pytest

from launch.run.tracking import (
    TrackerUnavailable,
    TrackingConfig,
    check_available,
    flat_config,
    mlflow_name,
    open_trackers,
    scalars,
)
from tests.tracker_readers import (
    mlflow_run,
    mlflow_scalars,
    same,
    tensorboard_hparams,
    tensorboard_images,
    tensorboard_scalars,
    wandb_offline_runs,
)


def test_scalars_keep_the_jsonl_names_and_flatten_number_dicts():
    row = {"step": 3, "version": 3, "mode": "on_policy", "reward/mean": 0.25, "updates": 1, "flag": True,
           "lag/hist": {"0": 12, "1": 4}, "guard/event": {"kind": "fallback", "message": "x"}, "none": None}
    assert scalars(row) == {"version": 3.0, "reward/mean": 0.25, "updates": 1.0, "flag": 1.0,
                            "lag/hist/0": 12.0, "lag/hist/1": 4.0}
    assert scalars({"step": 0, "version": 0, "eval/avg@n": 0.5}, skip=("step", "version")) == {"eval/avg@n": 0.5}


def test_flat_config_and_mlflow_names():
    assert flat_config({"learner": {"lr": 1e-6, "batch": {"n_reuse": 2}}, "stages": [{"max_tokens": 8}],
                        "model_dir": None, "tiny": True}) == {
        "learner.lr": 1e-6, "learner.batch.n_reuse": 2, "stages": '[{"max_tokens": 8}]', "model_dir": "null",
        "tiny": True}
    assert mlflow_name("eval/pass@4") == "eval/pass_at_4"
    assert mlflow_name("eval/tiny+arith/avg@n") == "eval/tiny_arith/avg_at_n"
    assert mlflow_name("lag/hist/0") == "lag/hist/0"


def test_tracking_flag_forms():
    assert TrackingConfig().backends == ["tensorboard"]
    assert TrackingConfig.model_validate("tensorboard,wandb,mlflow").backends == ["tensorboard", "wandb", "mlflow"]
    assert TrackingConfig.model_validate("none").backends == []
    assert TrackingConfig.model_validate(["mlflow"]).backends == ["mlflow"]
    with pytest.raises(ValueError, match="comet"):
        TrackingConfig.model_validate("tensorboard,comet")
    with pytest.raises(ValueError, match="repeat"):
        TrackingConfig.model_validate("wandb,wandb")


def test_tracking_flag_through_the_cli():
    from launch.run.compose import build_config

    cfg, _ = build_config(["--tiny", "--tracking", "wandb,mlflow", "--tracking.project", "abl"], "onpolicy")
    assert cfg.tracking.backends == ["wandb", "mlflow"] and cfg.tracking.project == "abl"


def test_a_missing_extra_names_its_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(TrackerUnavailable, match=r"--tracking wandb: the 'wandb' package is not installed; "
                                                 r"pip install -e '\.\[tracking\]'"):
        check_available(["tensorboard", "wandb"])
    check_available(["tensorboard", "mlflow"])


def _row(step: int, value: float) -> dict:
    return {"step": step, "version": step, "mode": "on_policy", "reward/mean": value, "lag/hist": {"0": step + 1}}


def test_a_resume_continues_the_same_tracker_run(tmp_path, monkeypatch):
    """Steps 0-2 and an evaluation, then a 'resume' from step 1 that retrains 1-2 and adds 3: one run in
    every tracker, whose values at steps 1-2 are the second incarnation's."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = TrackingConfig.model_validate("tensorboard,wandb,mlflow")
    run_dir, hparams = tmp_path / "runs" / "r-1", {"learner": {"lr": 1e-3}, "steps": 3}
    png = tmp_path / "fig.png"
    from PIL import Image

    Image.new("RGB", (8, 6), (200, 10, 10)).save(png)
    first = open_trackers(cfg, name="r-1", log_dir=run_dir, store_root=run_dir.parent, hparams=hparams, log=print)
    first.log_eval({"step": 0, "version": 0, "eval/avg@n": 0.25, "eval/pass@2": 0.5})
    for s in range(3):
        first.log_metrics(_row(s, 0.1 * s))
    first.log_image("compare", png, 0)
    first.close()
    # A resume is a new process, seconds later. TensorBoard reads a directory's event files in name order,
    # 'events.out.tfevents.<second>.<host>.<pid>.<n>': within one second of one process, n (a per-process
    # writer count) decides, and '10' sorts before '9' once earlier tests made writers here.
    time.sleep(1.1)
    second = open_trackers(cfg, name="r-1", log_dir=run_dir, store_root=run_dir.parent,
                           hparams={**hparams, "steps": 4}, start_step=1, log=print)
    for s in (1, 2, 3):
        second.log_metrics(_row(s, 1.0 + s))
    second.log_summary({"accuracy/last": 0.5, "steps": 4.0})
    second.close()
    expected = {0: 0.0, 1: 2.0, 2: 3.0, 3: 4.0}

    tb = tensorboard_scalars(run_dir / "tb")
    assert tb["reward/mean"].keys() == expected.keys()
    assert all(same(tb["reward/mean"][s], v) for s, v in expected.items()), tb["reward/mean"]
    assert tb["lag/hist/0"] == {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0} and tb["eval/avg@n"] == {0: 0.25}
    assert "version" in tb and "mode" not in tb
    assert tensorboard_images(run_dir / "tb")["compare"] == [(0, 8, 6)]
    assert tensorboard_hparams(run_dir / "tb")["learner.lr"] == pytest.approx(1e-3)

    client, runs = mlflow_run(f"file:{run_dir.parent / 'mlruns'}", "lagrl", "r-1")
    assert len(runs) == 1 and runs[0].info.run_name == "r-1" and runs[0].info.status == "FINISHED"
    ml = mlflow_scalars(client, runs[0].info.run_id)
    assert ml["reward/mean"] == pytest.approx(expected) and ml["eval/avg_at_n"] == {0: 0.25}
    assert ml["eval/pass_at_2"] == {0: 0.5}
    assert runs[0].data.params["learner.lr"] == "0.001" and runs[0].data.params["steps"] == "3"   # immutable
    artifacts = client.list_artifacts(runs[0].info.run_id, "figures/compare")
    assert [a.path for a in artifacts] == ["figures/compare/fig.png"]

    wb = wandb_offline_runs(run_dir / "wandb")
    assert [(r["id"], r["name"], r["project"]) for r in wb] == [("r-1", "r-1", "lagrl")] * 2
    assert wb[0]["config"]["learner"] == {"lr": 1e-3} and wb[1]["config"]["steps"] == 4
    steps = {}
    for r in wb:                               # `wandb sync` replays both files into the run r-1, in order
        for h in r["history"]:
            if "reward/mean" in h:
                steps[h["step"]] = h["reward/mean"]
    assert steps == pytest.approx(expected)
    assert any(h.get("eval/avg@n") == 0.25 and h["step"] == 0 for h in wb[0]["history"])
    assert wb[1]["summary"]["summary/steps"] == 4


def test_no_tracker_gets_a_secret(tmp_path, monkeypatch):
    """A Redis password in the config and on the command line (which W&B records) reaches none of the three
    backends' files: each gets the redacted config (launch.config.redact); the real run: test_run_secrets.py."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    password = "pw-6f1c0e9a2b7d4c38"
    url = f"redis://:{password}@127.0.0.1:6390/0"
    monkeypatch.setattr("sys.argv", ["launch/onpolicy.py", "--tiny", "--buffer.redis_url", url])
    run_dir, said = tmp_path / "runs" / "r-s", []
    hparams = {"buffer": {"redis_url": url}, "tracking": {"api_key": password, "mlflow_uri": None}, "steps": 3}
    trackers = open_trackers(TrackingConfig.model_validate("tensorboard,wandb,mlflow"), name="r-s", log_dir=run_dir,
                             store_root=run_dir.parent, hparams=hparams, log=said.append)
    trackers.log_metrics(_row(0, 0.5))
    trackers.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"tb", "wandb", "mlruns"} <= {part for p in files for part in p.relative_to(tmp_path).parts}
    assert [str(p) for p in files if password.encode() in p.read_bytes()] == [] and password not in str(said)
    hp = tensorboard_hparams(run_dir / "tb")
    assert hp["buffer.redis_url"] == "redis://:***@127.0.0.1:6390/0" and hp["tracking.api_key"] == "***"
    assert wandb_offline_runs(run_dir / "wandb")[0]["config"]["buffer"]["redis_url"] == "redis://:***@127.0.0.1:6390/0"
