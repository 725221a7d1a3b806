"""Stages of the smoke command: run each, print one PASS/FAIL/SKIP line, keep going, write the summary
(after every stage, so a command stopped from outside still leaves the stages that ran).

A stage is a function returning a dict of figures (its ``"line"`` entry is what the console shows); it
fails by raising, e.g. through :func:`require`. A stage that runs past its time limit is interrupted
(SIGALRM) and fails with the time it had.
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Callable


class StageFailed(AssertionError):
    """A check of the smoke command that did not hold (the message says what was seen)."""


class StageTimeout(TimeoutError):
    pass


def require(condition: bool, message: str) -> None:
    if not condition:
        raise StageFailed(message)


@contextmanager
def time_limit(seconds: float, what: str):
    """Interrupt the main thread after ``seconds`` (a hung engine start or placement must not hold
    the remaining stages hostage)."""
    def expire(signum, frame):
        raise StageTimeout(f"{what} still running after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Report:
    def __init__(self, device: str, out: Path, budget_s: float):
        self.device, self.out, self.budget_s = device, out, budget_s
        self.started = time.monotonic()
        self.stages: dict[str, dict] = {}
        self.tracebacks: list[str] = []
        self.notes: list[str] = []        # what a stage saw that is worth saying but is no failure
        self._stdout_fd = os.dup(1)       # the console, to give back if a stage leaves fd 1 elsewhere

    def run(self, number: int, name: str, fn: Callable[[], dict | None], limit_s: float) -> bool:
        t0 = time.monotonic()
        entry: dict = {}
        try:
            with time_limit(limit_s, f"stage {number} {name}"):
                entry = dict(fn() or {})
            ok, line = True, entry.pop("line", "")
        except BaseException as exc:       # KeyboardInterrupt too: the summary must still be written
            ok, line = False, f"{type(exc).__name__}: {str(exc).strip()}"[:600].replace("\n", " | ")
            tb = traceback.format_exc()
            entry |= {"error": line, "traceback": tb[-4000:]}
            self.tracebacks.append(f"---- stage {number} {name}\n{tb}")
            if isinstance(exc, KeyboardInterrupt):
                self._record(number, name, ok, t0, line, entry)
                raise
        self._record(number, name, ok, t0, line, entry)
        return ok

    def skip(self, number: int, name: str, why: str) -> None:
        self.stages[f"{number}_{name}"] = {"status": "SKIP", "why": why}
        print(f"[smoke] SKIP {number} {name}: {why}", flush=True)
        self.write()

    def time_left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def _record(self, number: int, name: str, ok: bool, t0: float, line: str, entry: dict) -> None:
        self._restore_stdout(f"stage {number} {name}")
        seconds = time.monotonic() - t0
        self.stages[f"{number}_{name}"] = {"status": "PASS" if ok else "FAIL", "seconds": round(seconds, 1), **entry}
        print(f"[smoke] {'PASS' if ok else 'FAIL'} {number} {name} ({seconds:.1f} s): {line}", flush=True)
        self.write()        # after every stage: a command stopped by its host's time limit still leaves what passed

    def _restore_stdout(self, who: str) -> None:
        """vLLM's ``suppress_stdout`` (around every gloo group it builds) points fd 1 at /dev/null and back;
        two groups built at once in one process (both ends of a collective here, while the engine core
        runs in this process) can leave it on /dev/null, and every later line would vanish."""
        if not os.path.samestat(os.fstat(1), os.fstat(self._stdout_fd)):
            os.dup2(self._stdout_fd, 1)
            self.notes.append(f"{who} left this process's stdout on another file (vLLM's suppress_stdout "
                              "racing between two gloo groups built at once); restored")

    @property
    def passed(self) -> bool:
        return all(s["status"] != "FAIL" for s in self.stages.values())

    def summary(self) -> dict:
        wall = time.monotonic() - self.started
        return {"device": self.device, "passed": self.passed, "wall_s": round(wall, 1),
                "within_budget": wall <= self.budget_s, "budget_s": self.budget_s, "notes": self.notes,
                "stages": {k: {f: v for f, v in s.items() if f != "traceback"} for k, s in self.stages.items()}}

    def write(self) -> dict:
        summary = self.summary()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        full = {**summary, "stages": self.stages}
        self.out.write_text(json.dumps(full, indent=1, default=str))
        if self.tracebacks:
            (self.out.parent / "smoke-tracebacks.log").write_text("\n".join(self.tracebacks))
        return summary
