"""Run a test selection N times, idle and with the CPU kept busy, and print pass counts per test.

    .venv/bin/python tests/repeat.py -n 5 tests/integration/test_faults_actor_redis.py
    .venv/bin/python tests/repeat.py -n 5 --modes load --hogs 2 -- tests/integration/test_buffer_server.py -k kill

A flaky test passes some runs and fails others; whether it needs a busy machine to fail is the
first clue to its cause. The load is this tool's own: ``--hogs`` processes that spin on a core
each, started before every loaded run and stopped (by pid) right after it. Each run is a fresh
``pytest`` process writing a JUnit XML report; the table counts passes per test and keeps the
first line of every distinct failure.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _spin() -> None:
    while True:
        pass


class CpuHog:
    """``n`` processes busy-looping until :meth:`stop` (or the ``with`` block) ends them."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self) -> CpuHog:
        ctx = multiprocessing.get_context("spawn")
        self.procs = [ctx.Process(target=_spin, daemon=True) for _ in range(self.n)]
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.join(10)
        self.procs = []


def run_once(selection: list[str], report: Path, timeout_s: float) -> tuple[dict[str, str], float]:
    """One pytest run; returns (test id -> 'passed' | 'failed: <first line>' | 'skipped', seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *selection]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _interrupt(proc)
        return {"<run>": f"failed: no result after {timeout_s:.0f}s"}, time.monotonic() - t0
    except BaseException:           # Ctrl-C / SIGTERM: let pytest tear its servers down first
        _interrupt(proc)
        raise
    seconds = time.monotonic() - t0
    if not report.exists():
        return {"<run>": "failed: pytest wrote no report"}, seconds
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            first = (problem.get("message") or problem.text or "").strip().splitlines()
            outcomes[name] = "failed: " + (first[0][:160] if first else "?")
        elif case.find("skipped") is not None:
            outcomes[name] = "skipped"
        else:
            outcomes[name] = "passed"
    return outcomes, seconds


def _interrupt(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGINT, as Ctrl-C would: pytest runs its fixtures' teardown (Ray, redis-server); SIGKILL
    only if it has not ended after ``grace_s``."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_all(args, counts, failures) -> None:
    """``args.runs`` runs per mode; fills ``counts`` and ``failures`` as each run finishes."""
    with tempfile.TemporaryDirectory(prefix="lagrl-repeat-") as tmp:
        for mode in args.modes:
            for i in range(args.runs):
                report = Path(tmp) / f"{mode}-{i}.xml"
                if mode == "load":
                    with CpuHog(args.hogs):
                        outcomes, seconds = run_once(args.selection, report, args.timeout)
                else:
                    outcomes, seconds = run_once(args.selection, report, args.timeout)
                passed = sum(v == "passed" for v in outcomes.values())
                failed = sorted(n for n, v in outcomes.items() if v.startswith("failed"))
                print(f"[repeat] {mode} run {i + 1}/{args.runs}: {passed}/{len(outcomes)} passed in {seconds:.0f}s"
                      + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
                for name, outcome in outcomes.items():
                    counts[name][mode] += outcome == "passed"
                    counts[name][f"{mode}/ran"] += outcome != "skipped"
                    if outcome.startswith("failed"):
                        failures[name].add(f"{mode}: {outcome}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--runs", type=int, default=5, help="runs per mode (default 5)")
    ap.add_argument("--modes", nargs="+", choices=("idle", "load"), default=["idle", "load"])
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="spinning processes under load")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per pytest run")
    ap.add_argument("selection", nargs="+", help="pytest arguments: files, node ids, -k/-m filters")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)     # `kill` stops the hogs and the run too

    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    failures: dict[str, set[str]] = defaultdict(set)
    interrupted = False
    try:
        run_all(args, counts, failures)
    except KeyboardInterrupt as stop:       # the runs that finished still count
        interrupted = True
        print(f"[repeat] interrupted ({stop or 'Ctrl-C'}): the hogs and the pytest run were stopped; "
              "the table counts the runs that finished", flush=True)
    width = max((len(n) for n in counts), default=10)
    print(f"\n{'test':<{width}}  " + "  ".join(f"{m:>9}" for m in args.modes))
    for name in sorted(counts):
        cells = [f"{counts[name][m]}/{counts[name][f'{m}/ran']}" for m in args.modes]
        print(f"{name:<{width}}  " + "  ".join(f"{c:>9}" for c in cells))
        for line in sorted(failures[name]):
            print(f"{'':<{width}}    {line}")
    if interrupted:
        return 130
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
