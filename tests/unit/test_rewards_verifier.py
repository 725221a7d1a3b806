"""MathVerifier: timeouts off the main thread, hard kill of a stuck subprocess, recovery after a crash."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rewards.config import RewardConfig
from rewards.math_reward import score_math_group
from rewards.math_verifier import MathVerifier


@pytest.fixture
def verifier():
    v = MathVerifier(timeout_s=2.0, kill_grace_s=0.5)
    v.start()                  # its subprocess warms math-verify's lazy imports before it is ready
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


def test_memory_bomb_stops_at_the_memory_limit():
    """2^{2^{34}} makes sympy build a 2 GiB integer. Under the subprocess's RLIMIT_AS (math_memory_mb) it
    fails at the limit, long before its generous timer: reward 0 with a reason (math-verify swallows the
    MemoryError into "wrong"; one that escapes is a parse_error naming the limit), the process's address
    space never passes the limit, and the process lives on to score the next answer. Without the limit
    the same answer ran to the timer, holding 279 MiB after 10 s."""
    cfg = RewardConfig(math_timeout_s=120.0, math_memory_mb=160)
    v = MathVerifier(cfg.math_timeout_s, cfg.math_kill_grace_s, memory_mb=cfg.math_memory_mb)
    try:
        start = time.monotonic()
        bomb, fine = score_math_group([r"The answer is \boxed{2^{2^{34}}}.", r"\boxed{3}"], "3", cfg, v)
        elapsed = time.monotonic() - start
        with open(f"/proc/{v.pid}/status", encoding="ascii") as f:
            vm_peak = int(re.search(r"VmPeak:\s+(\d+) kB", f.read()).group(1)) << 10
        restarts = v.restarts
    finally:
        v.close()
    assert bomb.reward == 0.0 and bomb.reason in ("wrong", "parse_error") and bomb.detail, bomb
    assert bomb.reason == "wrong" or "160 MiB memory limit" in bomb.detail, bomb
    assert vm_peak <= 160 << 20 and elapsed < cfg.math_timeout_s, (vm_peak, elapsed)
    assert fine.reason == "correct" and restarts == 0


def test_usable_from_many_threads(verifier):
    """math-verify's own timeout raises in non-main threads; ours does not."""
    golds = [str(i) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(lambda g: verifier.verify_many(g, [g, "100"]), golds))
    assert all(ok and [v for v, _ in vs] == ["correct", "wrong"] for ok, _, vs in out)


def test_child_imports_math_verify_from_the_parents_path(tmp_path):
    """An offline GPU host installs the wheels with `pip --target` and PYTHONPATH; the child runs with
    -I (which ignores PYTHONPATH), so it must get the parent's import path (the smoke's stage 5 failed so)."""
    import subprocess
    import sys

    import math_verify

    site = os.path.dirname(os.path.dirname(math_verify.__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = ("from rewards.math_verifier import MathVerifier\n"
              "v = MathVerifier(startup_timeout_s=30.0); v.start()\n"
              "print(v.verify_many('3', ['3'])[2]); v.close()\n")
    # the interpreter the venv was made from: math-verify is reachable only through PYTHONPATH there
    base = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([base, "-I", "-c", "import math_verify"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{base} has math-verify in its own site-packages: nothing to show")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([repo, site])}
    out = subprocess.run([base, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[('correct', '')]" in out.stdout


def test_a_child_that_dies_at_start_says_why():
    """A child that cannot start (here: too little memory for its imports) is named with its exit code
    and its stderr, at once, not after the 60 s start-up deadline."""
    from rewards.math_verifier import VerifierUnavailable

    v = MathVerifier(startup_timeout_s=60.0, memory_mb=16)
    t0 = time.monotonic()
    with pytest.raises(VerifierUnavailable, match=r"(?s)exited with code \d+ after .*MemoryError"):
        v.start()
    assert time.monotonic() - t0 < 30
    v.close()


def test_a_child_silent_past_the_start_deadline_is_killed_at_it(tmp_path, monkeypatch):
    """A child that is alive but never says ready is killed at the start-up deadline; no further wait
    for an exit that will not come (it once waited 5 s more to reap a child that was never dying)."""
    import rewards.math_verifier as mv

    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(mv, "_SERVER", str(hang))
    v = MathVerifier(startup_timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(mv.VerifierUnavailable, match=r"not ready after 1.0 s"):
        v.start()
    assert time.monotonic() - t0 < 3.5
    assert v.pid is None
