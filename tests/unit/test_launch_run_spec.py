"""launch.run.spec: a run as data -> its command line, its config, a process of its own. The one place the
science report, the ablation series and the Sky-T1 recipe build a run's argv."""

from __future__ import annotations

import sys
from pathlib import Path

import launch.run.spec as spec_module
from launch.run.spec import ENTRY, RunSpec, run_process


def test_argv_names_what_is_given_and_overrides_come_last(tmp_path):
    spec = RunSpec("reuse4_dr64_dt16", ("--learner.lr", "0.0001"), "routes", 2, 20)
    assert spec.argv(tmp_path) == ["--preset", "reuse4_dr64_dt16", "--routes", "--seed", "2", "--steps", "20",
                                   "--run_dir", str(tmp_path), "--run_id", spec.key, "--learner.lr", "0.0001"]
    # no world, seed or steps: the preset's own; a run id given is the run's
    bare = RunSpec("skyt1_prime", ("--data.model_dir", "m"), run_id="rl1-prime")
    assert bare.argv(tmp_path) == ["--preset", "skyt1_prime", "--run_dir", str(tmp_path), "--run_id", "rl1-prime",
                                   "--data.model_dir", "m"]
    assert bare.id == "rl1-prime" and spec.id == spec.key


def test_the_key_is_what_earlier_science_reports_named_their_runs():
    """A report resumed after this change finds its finished runs: the key hashes the same five fields."""
    spec = RunSpec("reuse4_dr64_dt16", ("--learner.lr", "0.0001", "--learner.checkpoint_every", "20"), "routes", 2, 20)
    assert spec.key == "reuse4_dr64_dt16-s2-eb926195"
    assert RunSpec(spec.preset, spec.overrides, spec.world, spec.seed, spec.steps, run_id="x").key == spec.key


def test_config_is_the_entry_scripts_config(tmp_path):
    cfg = RunSpec("onpolicy", ("--learner.lr", "3e-4"), "tiny", 1, 5, run_id="r").config(tmp_path)
    got = (cfg.preset, cfg.world, cfg.seed, cfg.steps, cfg.run_id, cfg.learner.lr)
    assert got == ("onpolicy", "tiny", 1, 5, "r", 3e-4)
    assert Path(cfg.run_dir) == tmp_path


def test_a_process_of_its_own_runs_the_entry_script_with_the_argv(tmp_path, monkeypatch):
    assert ENTRY.name == "ablate.py" and ENTRY.exists()
    spec = RunSpec("onpolicy", ("--x", "1"), "tiny", 0, 3)
    assert spec.command(tmp_path) == [sys.executable, str(ENTRY), *spec.argv(tmp_path)]
    script = tmp_path / "entry.py"
    script.write_text("import os, sys\nprint(sys.argv[1:], os.environ['PYTHONUNBUFFERED'])\nsys.exit(3)\n")
    monkeypatch.setattr(spec_module, "ENTRY", script)
    log = tmp_path / "run.log"
    assert run_process(spec, tmp_path, log=log) == 3
    assert log.read_text() == f"{spec.argv(tmp_path)} 1\n"
