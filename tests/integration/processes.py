"""Helpers for tests that drive a run as a subprocess and act on it mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float, proc: subprocess.Popen,
               log_tail: Callable[[], str], poll_s: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail the test with the
    process's log if the process exits first or ``timeout_s`` passes. Never a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"driver exited ({proc.returncode}) before {what}:\n{log_tail()}")
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}:\n{log_tail()}")


class DriverProcess:
    """A ``launch/`` entry script run as a subprocess in its own session, its output in a log file.

    ``env`` is the whole environment of the driver (pass ``RAY_ADDRESS`` to join a cluster,
    ``REDIS_URL`` for an external Redis). Teardown (:meth:`close`) asks a still running driver to
    stop cleanly (SIGTERM, as ``ray job stop`` does), then kills its whole session.
    """

    def __init__(self, script: str, *, run_dir: Path, run_id: str, args: list[str], env: dict, log_path: Path):
        self.run_id, self.run_path, self.log_path = run_id, run_dir / run_id, log_path
        cmd = [sys.executable, str(REPO / "launch" / script), "--run_dir", str(run_dir), "--run_id", run_id, *args]
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 5000) -> str:
        return self.log()[-n:]

    def wait_for(self, condition: Callable[[], Any], what: str, timeout_s: float, poll_s: float = 0.1) -> Any:
        return wait_until(condition, what, timeout_s, self.proc, self.log_tail, poll_s=poll_s)

    def kill(self) -> None:
        """SIGKILL the driver's whole session (driver, its local Ray if it started one)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def finish(self, timeout_s: float) -> dict:
        """Wait for a clean exit; returns the run's summary.json."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"driver still running after {timeout_s:.0f}s:\n{self.log_tail()}")
        assert rc == 0, f"driver exited {rc}:\n{self.log_tail()}"
        return json.loads((self.run_path / "summary.json").read_text())

    def close(self, grace_s: float = 90.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
