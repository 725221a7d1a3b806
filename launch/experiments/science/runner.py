"""Run every arm of the chosen findings with several seeds, one real run each, resumable.

Each run is a Ray job (``launch.experiments.science.jobs``: on a cluster, or on the one local Ray a report
starts for itself), its files written to ``<out>/runs/<run key>`` and its console to
``<out>/runs/<run key>.log``; several at a time. On 2 cores two runs side by side take little longer than
one: a strict on-policy step alternates generation and training, so one run keeps about one core busy.
Arms whose resolved configs are identical (the baseline under the names
``reuse1_dr64_dt64``, ``temp_1``, ``entropy_adaptive``) run once per seed and serve every finding
that names them. A run whose ``summary.json`` exists is done and is not run again, so an
interrupted report continues where it stopped; a run that fails is recorded with its error and
the log's tail, and the others go on. A run that keeps its final weights (a finding with
``final_model``) in a world that can split its entropy by the part of its grammar
(``entropy_split`` in ``launch.config.worlds``: the routes world, ``launch.worlds.routes.entropy_sources``)
is followed by that split at the start and the end (~20 s a model; the start once per seed), which
the decision-entropy checks read.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from launch.config.refs import load
from launch.config.worlds import WORLDS
from launch.experiments.science.findings import Arm, Finding
from launch.run.spec import RunSpec
from launch.run.summary import read_run_rows


def entropy_split_of(world: str | None) -> str | None:
    """The module that splits a policy's entropy by grammar part in ``world`` (its registry entry's
    ``entropy_split``), or None."""
    return None if world is None else WORLDS[world].entropy_split


def splits_entropy(spec: RunSpec) -> bool:
    """A run that keeps its final weights in a world with an entropy split: where its entropy sits is
    measured after it (the start and the end, ``ENTROPY_SOURCES``), for the checks on decision entropy."""
    return entropy_split_of(spec.world) is not None and "--learner.checkpoint_every" in spec.overrides


def spec_for(finding: Finding, arm: Arm, seed: int, steps: int, world: str | None) -> RunSpec:
    return RunSpec(arm.preset, (*finding.overrides, *arm.overrides), world, seed, finding.steps_for(steps))


def config_of(spec: RunSpec):
    return spec.config(Path("unused"))


def one_run_per_config(specs: dict) -> dict:
    """The same mapping with every spec replaced by the first one whose resolved config is the same
    (the preset's name, run id and directory aside): identical arms run once."""
    first: dict[str, RunSpec] = {}
    out = {}
    for name, spec in specs.items():
        cfg = config_of(spec).model_dump(mode="json", exclude={"preset", "run_id", "run_dir"})
        out[name] = first.setdefault(json.dumps(cfg, sort_keys=True), spec)
    return out


ENTROPY_SOURCES = "entropy_sources.json"


def read_rows(run_path: Path) -> list[dict]:
    """A finished run's step rows plus its evaluation rows (``launch.run.summary.read_run_rows``), and
    the split of its entropy at the start and the end (``ENTROPY_SOURCES``, a row of its last step) when
    it was measured."""
    rows = read_run_rows(run_path / "metrics.jsonl")
    if (path := run_path / ENTROPY_SOURCES).exists():
        last = max((r["step"] for r in rows if "step" in r), default=0)
        rows.append({"step": last, "entropy_sources/splits": json.loads(path.read_text())["splits"]})
    return rows


def _entropy_split(world: str, models: list[Path], seed: int, out: Path) -> str | None:
    """The world's entropy split (``python -m <entropy_split> --world ... --model ...``) of ``models`` into
    ``out`` (written whole or not at all)."""
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    argv = [a for m in models for a in ("--model", str(m))]
    proc = subprocess.run([sys.executable, "-m", entropy_split_of(world), "--world", world, *argv,
                           "--seed", str(seed), "--json", str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"entropy split of {models[-1]}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    tmp.replace(out)
    return None


def split_entropy(spec: RunSpec, run_path: Path) -> str | None:
    """Measure where the entropy of the world's warmed-up policy and of the run's final weights sits (the
    world's ``entropy_split``, sampled with the run's seed); None, or the error. The warmed-up policy's
    split is the same for every run of a seed: measured once per seed and world, kept beside the runs
    (``entropy-start-s<seed>-<world>.json``)."""
    ckpt = run_path / "checkpoints"
    if not (ckpt / "latest").exists():
        return f"{run_path}: no checkpoint (the run must keep its final weights: --learner.checkpoint_every)"
    final = ckpt / (ckpt / "latest").read_text().strip() / "hf"
    start = load(WORLDS[spec.world].build)(log=lambda *_: None).model_dir
    world = hashlib.sha256(str(start.resolve()).encode()).hexdigest()[:8]
    start_path = run_path.parent / f"entropy-start-s{spec.seed}-{world}.json"
    final_path = run_path / "entropy_final.json"
    for models, out in (([start], start_path), ([final], final_path)):
        if not out.exists() and (error := _entropy_split(spec.world, models, spec.seed, out)):
            return error
    first, last = (json.loads(p.read_text()) for p in (start_path, final_path))
    (run_path / ENTROPY_SOURCES).write_text(json.dumps(
        {**last, "models": first["models"] + last["models"], "splits": first["splits"] + last["splits"]}, indent=1))
    return None


def run_all(specs: list[RunSpec], out: Path, job_runner) -> dict[str, dict]:
    """Run what is not done yet as Ray jobs (``job_runner()``: a context giving a
    ``launch.experiments.science.jobs.JobRunner``, entered only when a run is left: a local Ray is started
    for nothing else); returns run key -> {"path", "seconds", "error"} for every spec, the ones done before
    included."""
    runs_dir = out / "runs"
    results, todo = {}, []
    for spec in dict.fromkeys(specs):
        path = runs_dir / spec.key
        if (path / "summary.json").exists():
            error = (split_entropy(spec, path) if splits_entropy(spec) and not (path / ENTROPY_SOURCES).exists()
                     else None)      # a run done before its split was measured, or whose split failed
            results[spec.key] = {"path": str(path), "error": error,
                                 "seconds": json.loads((path / "summary.json").read_text())["seconds"]}
        else:
            todo.append(spec)
    # the longest runs first (entropy_control_reuse's 40 steps take ~4x a 20-step run): started last,
    # one would leave the other core idle for most of its length at the end of the report
    todo.sort(key=lambda spec: -(spec.steps or 0))
    print(f"[science] {len(results)} of {len(results) + len(todo)} runs done before, kept; {len(todo)} to run",
          flush=True)
    if todo:
        with job_runner() as jobs:
            results.update(jobs.run_all(todo))
    return results
