"""A run as data (:class:`RunSpec`: preset, overrides, world, seed, steps) and the one way to start it: in
this process (:func:`run_here`) or as a process of its own (:func:`run_process`). Every tool that runs
presets goes through here, so a run's command line is built in one place (:meth:`RunSpec.argv`):

    science report   python -m launch.experiments.science   a Ray job per run (experiments.science.jobs:
                                                             run_here inside the job), side by side
    ablation series  python -m launch.experiments.ablation  in this process, one Ray for all runs
    Sky-T1 recipe    python -m launch.recipes.skyt1         a process per RL stage

    spec = RunSpec("reuse4_dr64_dt16", ("--learner.lr", "1e-4"), world="tiny", seed=0, steps=20)
    spec.argv(Path("runs"))    # --preset reuse4_dr64_dt16 --tiny --seed 0 --steps 20 --run_dir runs --run_id <id>
                               #   --learner.lr 1e-4
    spec.config(Path("runs"))  # the RunConfig that command line gives (launch.run.compose.build_config)
    run_process(spec, Path("runs"), log=Path("runs/x.log"))   # python launch/ablate.py <argv>: its exit status

A process of its own is the entry script every user runs (``launch/ablate.py``: any preset by name), so
a run started here is the same run a user would start by hand, with its own Ray driver, its own
signals and its own console.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from launch.run.compose import build_config

ENTRY = Path(__file__).resolve().parents[1] / "ablate.py"       # the entry script: any preset by name


@dataclass(frozen=True)
class RunSpec:
    """One run: a preset, its overrides, the world (None: the preset as it is), the seed and steps (None:
    the preset's), the run id (None: :attr:`key`)."""

    preset: str
    overrides: tuple[str, ...] = ()
    world: str | None = None
    seed: int | None = None
    steps: int | None = None
    run_id: str | None = None

    @property
    def key(self) -> str:
        """``<preset>-s<seed>-<hash>``: the same for the same preset, overrides, world, seed and steps."""
        text = json.dumps([self.preset, self.overrides, self.world, self.seed, self.steps])
        return f"{self.preset}-s{self.seed}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"

    @property
    def id(self) -> str:
        """The run id: its directory under the run dir, its Redis namespace, its tracker run."""
        return self.run_id or self.key

    def argv(self, run_dir: Path) -> list[str]:
        """The command line of the run (the entry scripts' options; overrides last, so they win)."""
        world = [] if self.world is None else [f"--{self.world}"]          # --tiny, --reasoning, ...
        seed = [] if self.seed is None else ["--seed", str(self.seed)]
        steps = [] if self.steps is None else ["--steps", str(self.steps)]
        return ["--preset", self.preset, *world, *seed, *steps, "--run_dir", str(run_dir), "--run_id", self.id,
                *self.overrides]

    def command(self, run_dir: Path) -> list[str]:
        """The run as a process: this Python, the entry script, :meth:`argv`."""
        return [sys.executable, str(ENTRY), *self.argv(run_dir)]

    def config(self, run_dir: Path):
        """The resolved RunConfig (a bad preset or override exits here, with the entry scripts' message)."""
        return build_config(self.argv(run_dir), default_preset=self.preset)[0]


def run_here(spec: RunSpec, run_dir: Path, on_step=None):
    """The run in this process (``launch.run.driver.run``); returns its RunResult. Several runs in one
    process share one Ray: ``launch.run.driver.init_ray`` it first, sized for the largest."""
    from launch.run.driver import run      # here: Ray, vLLM and DeepSpeed come with it, and a subprocess run needs none

    return run(spec.config(run_dir), on_step)


def run_process(spec: RunSpec, run_dir: Path, *, log: Path | None = None, cwd: Path | None = None) -> int:
    """The run as a process of its own (:meth:`RunSpec.command`), its console into ``log`` (None: this
    console); returns its exit status."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if log is None:
        return subprocess.run(spec.command(run_dir), env=env, cwd=cwd).returncode
    with open(log, "w") as out:
        return subprocess.run(spec.command(run_dir), stdout=out, stderr=subprocess.STDOUT, env=env,
                              cwd=cwd).returncode
