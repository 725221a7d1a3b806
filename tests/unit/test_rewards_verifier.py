"""MathVerifier: timeouts off the main thread, hard kill of a stuck subprocess, recovery after a crash."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rewards.math_verifier import MathVerifier


@pytest.fixture
def verifier():
    v = MathVerifier(timeout_s=2.0, kill_grace_s=0.5)
    v.start()
    yield v
    v.close()


def test_soft_timeout_keeps_the_process(verifier):
    verifier.timeout_s = 0.5
    pid = verifier.pid
    ok, _, verdicts = verifier.verify_many("3", [r"10^{10^{10}}", "3"])
    assert ok and [v for v, _ in verdicts] == ["timeout", "correct"]
    assert verifier.pid == pid and verifier.restarts == 0


def test_stuck_subprocess_is_killed_and_replaced(verifier):
    """A verifier that ignores its soft timer (as when stuck in C code) is simulated by SIGSTOP."""
    assert verifier.verify_many("3", ["3"])[2] == [("correct", "")]  # warm: the gold parse is cached
    old_pid = verifier.pid
    stopper = threading.Timer(0.3, lambda: os.kill(old_pid, signal.SIGSTOP))
    stopper.start()
    start = time.monotonic()
    ok, _, verdicts = verifier.verify_many("3", [r"9^{9^{9}}", "3"])
    stopper.join()
    assert ok and verdicts[0][0] == "timeout" and "killed" in verdicts[0][1]
    assert verdicts[1] == ("correct", "")  # the rest was resent to a fresh process
    assert verifier.restarts == 1 and verifier.pid != old_pid
    assert time.monotonic() - start < 2.5 + 15  # timeout + grace, plus a fresh sympy import
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)


def test_recovers_after_the_subprocess_dies(verifier):
    os.kill(verifier.pid, signal.SIGKILL)
    time.sleep(0.05)
    assert verifier.verify_many(r"\frac12", ["0.5"])[2] == [("correct", "")]


def test_usable_from_many_threads(verifier):
    """math-verify's own timeout raises in non-main threads; ours does not."""
    golds = [str(i) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(lambda g: verifier.verify_many(g, [g, "100"]), golds))
    assert all(ok and [v for v, _ in vs] == ["correct", "wrong"] for ok, _, vs in out)
