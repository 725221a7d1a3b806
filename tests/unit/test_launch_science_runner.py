"""launch.experiments.science.runner.split_entropy: the warmed-up policy's split is measured once per seed and world
and shared by every run of that seed; each run's file holds [start, final] as the verdicts read it."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import launch.experiments.science.runner as runner
import launch.worlds.routes.build as routes_build
from launch.experiments.science.runner import ENTROPY_SOURCES, RunSpec, split_entropy


def _run_with_checkpoint(root: Path, name: str) -> Path:
    path = root / name
    (path / "checkpoints" / "step_3" / "hf").mkdir(parents=True)
    (path / "checkpoints" / "latest").write_text("step_3\n")
    return path


def test_start_split_measured_once_per_seed(tmp_path, monkeypatch):
    start_model = tmp_path / "world" / "model"
    monkeypatch.setattr(routes_build, "ensure_routes_world", lambda log=None: SimpleNamespace(model_dir=start_model))
    measured = []

    def fake_split(world, models, seed, out):
        assert world == "routes"
        measured.append((models[0].name if models[0] == start_model else "final", seed))
        out.write_text(json.dumps({"seed": seed, "temperature": 1.0, "models": [str(m) for m in models],
                                   "splits": [{"model": str(m)} for m in models]}))

    monkeypatch.setattr(runner, "_entropy_split", fake_split)
    runs = tmp_path / "runs"
    for name, seed in (("a-s0", 0), ("b-s0", 0), ("c-s1", 1)):
        path = _run_with_checkpoint(runs, name)
        assert split_entropy(RunSpec("p", ("--learner.checkpoint_every", "3"), "routes", seed, 3), path) is None
        got = json.loads((path / ENTROPY_SOURCES).read_text())
        final = path / "checkpoints" / "step_3" / "hf"
        assert got["models"] == [str(start_model), str(final)] and got["seed"] == seed
        assert [s["model"] for s in got["splits"]] == [str(start_model), str(final)]
    assert measured == [("model", 0), ("final", 0), ("final", 0), ("model", 1), ("final", 1)]


def test_a_run_without_final_weights_is_an_error(tmp_path):
    (tmp_path / "r").mkdir()
    error = split_entropy(RunSpec("p", (), "routes", 0, 3), tmp_path / "r")
    assert error and "no checkpoint" in error


def test_a_finding_that_needs_more_steps_runs_them():
    """entropy_control_reuse's entropy crosses the 0.2 target at steps 16-30 of the slips world's reuse-4:
    at the report's default 20 steps the controller would never act, so the finding runs at least 40."""
    from launch.experiments.science.findings import finding
    from launch.experiments.science.runner import config_of, spec_for

    ec, reuse = finding("entropy_control_reuse"), finding("reuse")
    assert spec_for(ec, ec.arms[0], 0, 20, None).steps == 40 and spec_for(ec, ec.arms[0], 0, 60, None).steps == 60
    assert spec_for(reuse, reuse.arms[0], 0, 20, None).steps == 20
    rules = {a.name: config_of(spec_for(ec, a, 0, 20, "tiny")).learner for a in ec.arms}
    assert {lc.batch.n_sgd for lc in rules.values()} == {16}           # one factor: the entropy rule
    assert [(lc.entropy.type, getattr(lc.entropy, "delta", None), getattr(lc.entropy, "coef", None))
            for lc in rules.values()] == [("adaptive", 1e-4, None), ("none", None, None), ("fixed", None, 1e-2)]


class _Jobs:
    """What run_all hands its runs to (launch.experiments.science.jobs.JobRunner's run_all), recorded."""

    def __init__(self):
        self.started, self.entered = [], 0

    @contextmanager
    def __call__(self):
        self.entered += 1
        yield self

    def run_all(self, specs):
        self.started += [(spec.preset, spec.steps) for spec in specs]
        return {spec.key: {"path": "", "seconds": 1.0, "error": None} for spec in specs}


def test_the_longest_runs_start_first_and_done_runs_are_kept(tmp_path):
    """Two runs side by side: a 40-step run queued last would run alone at the report's end. A run whose
    summary.json exists is not run again; with nothing left, no Ray is started (the runner is not entered)."""
    jobs = _Jobs()
    specs = [RunSpec("a", (), "slips", 0, 20), RunSpec("b", (), "slips", 0, 40), RunSpec("c", (), "slips", 0, 20)]
    done_before = tmp_path / "runs" / specs[2].key
    done_before.mkdir(parents=True)
    (done_before / "summary.json").write_text(json.dumps({"seconds": 12.0}))
    done = runner.run_all(specs, tmp_path, jobs)
    assert jobs.started == [("b", 40), ("a", 20)] and len(done) == 3 and done[specs[2].key]["seconds"] == 12.0
    for spec in specs[:2]:
        (tmp_path / "runs" / spec.key).mkdir()
        (tmp_path / "runs" / spec.key / "summary.json").write_text(json.dumps({"seconds": 1.0}))
    assert len(runner.run_all(specs, tmp_path, jobs)) == 3 and jobs.entered == 1


def test_no_arm_warms_up_its_learning_rate():
    """The warm-up counts optimizer updates (the tiny world's 10): reuse-4 (16 updates a step) would finish it
    inside step 0 and on-policy in step 9; the report runs every arm at a constant learning rate."""
    from dataclasses import replace

    from launch.experiments.science.__main__ import fair_overrides
    from launch.experiments.science.findings import finding
    from launch.experiments.science.runner import config_of, spec_for

    reuse = finding("reuse")
    assert config_of(spec_for(reuse, reuse.arms[0], 0, 20, "tiny")).learner.warmup_steps == 10   # the world's own
    fair = replace(reuse, overrides=fair_overrides([reuse], "tiny", 20)["reuse"])
    cfgs = [config_of(spec_for(fair, arm, 0, 20, "tiny")) for arm in fair.arms]
    assert {c.learner.warmup_steps for c in cfgs} == {0} and len({c.learner.lr for c in cfgs}) == 1
