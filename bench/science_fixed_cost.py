"""The fixed cost of a science-report run, before and after: one mini-report per checkout, the same command.

    .venv/bin/python bench/science_fixed_cost.py --before /tmp/lagrl-before --out /tmp/fixed-cost
    .venv/bin/python bench/science_fixed_cost.py --out /tmp/fixed-cost       # this checkout only

Each checkout runs ``python -m launch.experiments.science --findings reuse --seeds 2 --steps 2
--world tiny`` (held-out evaluation on 16 problems; its own reuse finding: two or three arms before, the
four-arm factorial since) with the same world cache. A run's fixed cost is its
wall time as the report measured it (the ``[science] ... done in N s`` line: the run's process, or its Ray
job from submission to end) minus the time its learner spent in steps (the sum of ``time/step``: waiting
for data, training, weight sync): start-up to the first step plus the end. Printed per run, then the
medians over the report's runs and after ÷ before.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
REPORT = ["--findings", "reuse", "--seeds", "2", "--steps", "2", "--world", "tiny",
          "--override", "data.eval_max_problems=16"]
DONE = re.compile(r"\[science\] \d+/\d+ (\S+) done in (\d+) s")
STARTED = re.compile(r"\[driver\] started in ([\d.]+) s")


def run_report(checkout: Path, out: Path, python: str, extra: list[str]) -> dict:
    """One mini-report in ``checkout``; per run: wall, stepping time, fixed cost, start-up line."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "LAGRL_CACHE": os.environ.get("LAGRL_CACHE", str(HERE / ".cache")), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.run([python, "-m", "launch.experiments.science", *REPORT, *extra, "--out", str(out)], cwd=checkout,
                          env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the report in {checkout} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    runs = {}
    for key, wall in DONE.findall(proc.stdout):
        rows = [json.loads(line) for line in (out / "runs" / key / "metrics.jsonl").read_text().splitlines() if line]
        stepping = sum(float(r["time/step"]) for r in rows if "time/step" in r)
        started = STARTED.search((out / "runs" / f"{key}.log").read_text())
        runs[key] = {"wall_s": float(wall), "stepping_s": round(stepping, 1), "fixed_s": round(float(wall) - stepping, 1),
                     "driver_started_s": float(started.group(1)) if started else None}
    if not runs:
        raise SystemExit(f"no finished run in the report's output:\n{proc.stdout[-3000:]}")
    return {"checkout": str(checkout), "report_s": round(seconds, 1), "runs": runs,
            "median_fixed_s": statistics.median(r["fixed_s"] for r in runs.values()),
            "median_wall_s": statistics.median(r["wall_s"] for r in runs.values())}


def show(label: str, result: dict) -> None:
    print(f"{label}: {result['checkout']}: report {result['report_s']:.0f} s, {len(result['runs'])} runs")
    for key, r in result["runs"].items():
        print(f"  {key:<34} wall {r['wall_s']:>5.0f} s  steps {r['stepping_s']:>5.1f} s  fixed {r['fixed_s']:>5.1f} s  "
              f"[driver] started in {r['driver_started_s']} s")
    print(f"  median fixed {result['median_fixed_s']:.1f} s, median wall {result['median_wall_s']:.1f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the earlier version (git worktree)")
    ap.add_argument("--after", type=Path, default=HERE, help="default: this checkout")
    ap.add_argument("--python", default=sys.executable, help="the interpreter with lagrl's dependencies")
    ap.add_argument("--after-override", action="append", default=["data.probe_problems=0"], metavar="KEY=VALUE",
                    help="overrides for the later checkout only, so both do the same work (default: no entropy "
                    "probe, which the earlier one does not have)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    results = {}
    after_extra = [arg for o in args.after_override for arg in ("--override", o)]
    for label, checkout, extra in (("before", args.before, []), ("after", args.after, after_extra)):
        if checkout is not None:
            results[label] = run_report(checkout.resolve(), args.out / label, args.python, extra)
            show(label, results[label])
            (args.out / f"{label}.json").write_text(json.dumps(results[label], indent=1))
    if len(results) == 2:
        ratio = results["after"]["median_fixed_s"] / results["before"]["median_fixed_s"]
        print(f"fixed cost per run, median: after / before = {ratio:.2f} "
              f"({results['after']['median_fixed_s']:.1f} s / {results['before']['median_fixed_s']:.1f} s); "
              f"report: {results['after']['report_s']:.0f} s / {results['before']['report_s']:.0f} s")
    (args.out / "fixed_cost.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
