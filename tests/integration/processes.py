"""Helpers for tests that drive a run as a subprocess and act on it mid-run."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest


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
