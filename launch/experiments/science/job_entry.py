"""One run of the science report inside a Ray job (``launch.experiments.science.jobs`` submits it):

    python -m launch.experiments.science.job_entry --spec '<RunSpec as JSON>'

The run itself is the ordinary one (``launch.run.spec.run_here``: its driver joins the job's cluster through
RAY_ADDRESS), in a directory of this node; then, where the finding needs it, the split of its entropy by
grammar part. What the report reads of it comes back through the job's own log: after the run's console,
one block between ``RESULTS_BEGIN`` and ``RESULTS_END`` holding those files (:data:`REPORT_FILES`, JSON of
name -> text, base64), which the report parses out of the job's log. No filesystem is shared.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import sys
import tempfile
from pathlib import Path

from launch.config.install_check import require_own_packages
from launch.config.redact import redact
from launch.experiments.science.runner import split_entropy, splits_entropy
from launch.run.spec import RunSpec, run_here

REPORT_FILES = ("summary.json", "metrics.jsonl", "evals.jsonl", "entropy_sources.json", "placement.json",
                "config.json")
REDACTED_FILES = ("config.json",)   # may hold --buffer.redis_url's password: it travels with its secrets hidden
RESULTS_BEGIN, RESULTS_END = "[lagrl-results] begin", "[lagrl-results] end"


def results_block(run_path: Path) -> str:
    """The report's files of a finished run, as the lines the job prints last."""
    files = {name: (run_path / name).read_text() for name in REPORT_FILES if (run_path / name).exists()}
    for name in set(REDACTED_FILES) & set(files):
        files[name] = json.dumps(redact(json.loads(files[name])), indent=2)
    return f"{RESULTS_BEGIN}\n{base64.b64encode(json.dumps(files).encode()).decode()}\n{RESULTS_END}"


def parse_results(log: str) -> dict[str, str] | None:
    """The files of the last results block in a job's log; None if it holds none (the job did not finish)."""
    end = log.rfind(RESULTS_END)
    begin = log.rfind(RESULTS_BEGIN, 0, end) if end >= 0 else -1
    if begin < 0:
        return None
    return json.loads(base64.b64decode(log[begin + len(RESULTS_BEGIN):end].strip()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", required=True, help="the run: RunSpec's fields as JSON")
    args = ap.parse_args(argv)
    require_own_packages()
    fields = json.loads(args.spec)
    spec = RunSpec(**{**fields, "overrides": tuple(fields.get("overrides", ()))})
    runs_dir = Path(tempfile.mkdtemp(prefix="lagrl-science-"))
    try:
        run_here(spec, runs_dir)
        run_path = runs_dir / spec.id
        if not (run_path / "summary.json").exists():
            print(f"[science] {spec.key}: the run ended without a summary", file=sys.stderr, flush=True)
            return 1
        if splits_entropy(spec) and (error := split_entropy(spec, run_path)):
            print(f"[science] {spec.key}: {error}", file=sys.stderr, flush=True)
            return 1
        print(results_block(run_path), flush=True)
        return 0
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)     # what the report reads has left in the block above


if __name__ == "__main__":
    sys.exit(main())
