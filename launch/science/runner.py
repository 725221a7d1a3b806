"""Run every arm of the chosen findings with several seeds, one real run each, resumable.

Runs go one after another in this process through the ordinary driver (``launch.run.driver.run``:
Ray, vLLM, Redis and DeepSpeed as in any run), each in ``<out>/runs/<run key>``. An arm shared by
several findings (the same preset, overrides, world and seed) runs once. A run whose
``summary.json`` exists is done and is not run again, so an interrupted report continues where it
stopped; a run that fails is recorded with its error and the others go on.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from launch.science.findings import Arm, Finding


@dataclass(frozen=True)
class RunSpec:
    """One run: a preset, its overrides, the world and the seed; ``argv`` is the CLI that makes its config."""

    preset: str
    overrides: tuple[str, ...]
    world: str | None          # "tiny", "reasoning", None = the paper-scale preset as is (--full)
    seed: int
    steps: int

    @property
    def key(self) -> str:
        text = json.dumps([self.preset, self.overrides, self.world, self.seed, self.steps])
        return f"{self.preset}-s{self.seed}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"

    def argv(self, run_dir: Path) -> list[str]:
        world = [] if self.world is None else [f"--{self.world}"]       # --tiny / --reasoning
        return ["--preset", self.preset, *world, "--seed", str(self.seed), "--steps", str(self.steps),
                "--run_dir", str(run_dir), "--run_id", self.key, *self.overrides]


def spec_for(finding: Finding, arm: Arm, seed: int, steps: int, world: str | None) -> RunSpec:
    return RunSpec(arm.preset, (*finding.overrides, *arm.overrides), world, seed, steps)


def read_rows(run_path: Path) -> list[dict]:
    """A finished run's step rows plus its evaluation rows (from summary.json)."""
    from launch.run.summary import read_metrics

    summary = json.loads((run_path / "summary.json").read_text())
    return read_metrics(run_path / "metrics.jsonl") + list(summary.get("evals") or [])


def run_all(specs: list[RunSpec], out: Path, log=print) -> dict[str, dict]:
    """Run what is not done yet; returns run key -> {"path", "seconds", "error"}."""
    from launch.cli import build_config
    from launch.run.driver import run

    runs_dir = out / "runs"
    todo = {s.key: s for s in specs}
    results = {}
    for i, (key, spec) in enumerate(todo.items(), 1):
        path = runs_dir / key
        if (path / "summary.json").exists():
            results[key] = {"path": str(path), "seconds": json.loads((path / "summary.json").read_text())["seconds"],
                            "error": None}
            log(f"[science] {i}/{len(todo)} {key}: done before, kept")
            continue
        log(f"[science] {i}/{len(todo)} {key}: {' '.join(spec.argv(runs_dir))}")
        t0 = time.monotonic()
        try:
            cfg, _ = build_config(spec.argv(runs_dir), default_preset=spec.preset)
            run(cfg)
            results[key] = {"path": str(path), "seconds": time.monotonic() - t0, "error": None}
        except Exception as exc:            # one failed arm must not lose the others: it is reported
            results[key] = {"path": str(path), "seconds": time.monotonic() - t0,
                            "error": f"{type(exc).__name__}: {exc}"}
            log(f"[science] {key} failed: {results[key]['error']}\n{traceback.format_exc(limit=5)}")
    return results
