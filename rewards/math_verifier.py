"""MathVerifier: math-verify behind a persistent subprocess, so every call has a timeout from any thread.

Why a subprocess: math-verify's timeout is signal.alarm, which only works in the main thread, and
rewards run in Ray actors and thread pools. With its timeout disabled, one adversarial answer
(`\\boxed{10^{10^{10}}}` makes sympy compute a ten-billion-digit power in C) would hang the worker
forever; no thread can be interrupted out of C code, but a process can be killed. So:

  * one long-lived child (`_math_verify_server.py`) per MathVerifier, started lazily, talking
    newline-delimited JSON over pipes; a whole group (gold + distinct extracted answers) is one
    request, and verdicts stream back one per answer;
  * the child applies a soft per-answer timer (SIGALRM works there: it is the child's main thread)
    and an address-space limit (memory_mb, RLIMIT_AS), so an answer that builds a huge number fails
    there with MemoryError instead of growing until the kill;
  * the parent waits timeout + grace per answer; past that it kills the child's process group,
    records `timeout` for that answer and resends the rest to a fresh child;
  * a group's distinct answers share a budget too (group_timeout_s): once it is spent, each answer
    left gets a short timer (LATE_TIMEOUT_S, ~100x what an ordinary answer takes; the parent's kill
    follows it too), so a policy that writes 16 different slow answers costs its group about
    group_timeout_s plus a fraction of a second per answer, not 16 x timeout_s (80 s at the defaults);
  * past that budget a group may cost at most MAX_LATE_KILLS hard kills: answers stuck in C ignore the
    soft timer, and each kill costs the grace and a fresh sympy import (16 of them took one group 60 s
    with 9 restarts on a busy machine). After the last, the answers left are `timeout` unverified,
    ordinary ones among them too: the price of a bounded group (a policy gains nothing by it, while a
    group it could hold for minutes might go stale and escape its negative rewards).

Cost: ~0.1 ms of JSON + pipe round trip per group (negligible next to the 1-5 ms math-verify needs
per answer; see bench/reward_throughput.py), one extra Python process (~60-100 MB RSS with sympy)
per verifier, and ~0.5 s (idle machine) to re-import sympy after a hard kill, paid only when an
answer ignores the soft timer. Calls on one MathVerifier are serialised by a lock; use one verifier
per worker (RewardWorker does) for parallelism.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_SERVER = str(Path(__file__).with_name("_math_verify_server.py"))
LATE_TIMEOUT_S = 0.25       # an answer's timer once its group's budget is spent
MAX_LATE_KILLS = 2          # hard kills a group may cost once its budget is spent (module docstring)
LATE_MARGIN_S = 0.5         # the parent's clock runs ahead of the child's: its kill uses the late
                            # timer only this long past the deadline, never before the child does


class VerifierUnavailable(RuntimeError):
    """The subprocess could not be started or did not become ready in time."""


class MathVerifier:
    """verify_many(gold, preds) -> (gold_ok, gold_detail, [(verdict, detail), ...]), never raising
    for a bad answer; verdicts are "correct" | "wrong" | "parse_error" | "timeout"."""

    def __init__(self, timeout_s: float = 5.0, kill_grace_s: float = 1.0, startup_timeout_s: float = 60.0,
                 memory_mb: int = 2048, group_timeout_s: float = 10.0):
        self.timeout_s, self.kill_grace_s, self.startup_timeout_s = timeout_s, kill_grace_s, startup_timeout_s
        self.group_timeout_s = group_timeout_s
        self.memory_mb = memory_mb  # the subprocess's RLIMIT_AS, from its next start
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._lock = threading.Lock()
        self.restarts = 0  # hard kills + crashes, for metrics and tests

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            self._ensure_started()

    def close(self) -> None:
        with self._lock:
            self._kill()

    def __del__(self):  # best effort; close() is the contract
        try:
            self._kill()
        except Exception:
            pass

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._kill()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        import_path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        with tempfile.TemporaryFile() as stderr:   # read back only if the child dies before it is ready
            self._proc = subprocess.Popen([sys.executable, "-I", _SERVER, str(self.memory_mb), import_path],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env,
                                          start_new_session=True, close_fds=True)
            self._buf = b""
            t0 = time.monotonic()
            deadline = t0 + self.startup_timeout_s
            msg = self._read(deadline)
            if msg is None or not msg.get("ready"):
                if time.monotonic() < deadline:
                    # EOF comes when the child closes its pipes, a moment before it can be reaped:
                    # poll() alone read a crash as "not ready after 60 s"
                    try:
                        code = self._proc.wait(timeout=5.0)
                    except subprocess.TimeoutExpired:
                        code = None
                else:       # still silent at the deadline: alive, no wait for an exit that will not come
                    code = self._proc.poll()
                self._kill()
                stderr.seek(0)
                tail = stderr.read()[-1500:].decode(errors="replace").strip()
                why = (f"exited with code {code} after {time.monotonic() - t0:.1f} s" if code is not None
                       else f"not ready after {self.startup_timeout_s} s")
                raise VerifierUnavailable(f"math-verify subprocess {why}" + (f": {tail}" if tail else ""))

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing else is in the group
            except ProcessLookupError:
                pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        proc.wait()

    # --- I/O ------------------------------------------------------------------------------------
    def _read(self, deadline: float) -> dict | None:
        """Next JSON line from the child, or None on deadline / EOF (the child died)."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:  # protocol corrupted: treat like a dead child (caller kills and restarts)
            return None

    def _send(self, gold: str, preds: list[str], group_deadline: float) -> bool:
        request = {"gold": gold, "preds": preds, "timeout": self.timeout_s, "late_timeout": LATE_TIMEOUT_S,
                   "group_timeout": max(group_deadline - time.monotonic(), 0.0)}
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    # --- the one public call ----------------------------------------------------------------------
    def verify_many(self, gold: str, preds: list[str]) -> tuple[bool, str, list[tuple[str, str]]]:
        budget = self.timeout_s + self.kill_grace_s
        verdicts: list[tuple[str, str]] = []
        with self._lock:
            group_deadline = None       # from the first answer on: a resend after a kill keeps it
            first, send_failures, late_kills = True, 0, 0
            while first or len(verdicts) < len(preds):
                rest = preds[len(verdicts):]
                try:
                    self._ensure_started()
                except VerifierUnavailable as e:
                    return True, "", verdicts + [("timeout", str(e))] * len(rest)
                if group_deadline is None:          # a fresh verifier's start-up is not the group's time
                    group_deadline = time.monotonic() + self.group_timeout_s
                if not self._send(gold, rest, group_deadline):  # the child died between requests: one fresh try
                    self._restart()
                    send_failures += 1
                    if send_failures > 1:
                        return True, "", verdicts + [("parse_error", "verifier pipe broken")] * len(rest)
                    continue
                msg = self._read(time.monotonic() + 2 * budget)  # the gold: two parses' budget
                if msg is None:
                    self._restart()
                    if first:
                        return False, "gold answer parse timed out (verifier killed)", []
                    return True, "", verdicts + [("timeout", "gold re-parse timed out")] * len(rest)
                if not msg["gold_ok"]:
                    return False, msg["detail"], []
                first = False
                for _ in rest:
                    now = time.monotonic()
                    late = now > group_deadline + LATE_MARGIN_S
                    msg = self._read(now + (min(self.timeout_s, LATE_TIMEOUT_S) + self.kill_grace_s if late else budget))
                    if msg is None:  # stuck in C past the soft timer, or crashed: kill, record, resend the rest
                        crashed = self._proc.poll() is not None
                        self._restart()
                        verdicts.append(("parse_error", "verifier process crashed") if crashed else
                                        ("timeout", f"verifier killed after {time.monotonic() - now:.2g} s"))
                        late_kills += time.monotonic() > group_deadline
                        if late_kills >= MAX_LATE_KILLS:
                            left = len(preds) - len(verdicts)
                            return True, "", verdicts + [("timeout", (
                                f"not verified: the group's {self.group_timeout_s:g} s budget was spent and its "
                                f"verifier killed {late_kills} times past it"))] * left
                        break
                    verdicts.append((msg["v"], msg["d"]))
            return True, "", verdicts

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1


_default: MathVerifier | None = None
_default_lock = threading.Lock()


def default_verifier(timeout_s: float = 5.0, kill_grace_s: float = 1.0, startup_timeout_s: float = 60.0,
                     memory_mb: int = 2048, group_timeout_s: float = 10.0) -> MathVerifier:
    """The process-wide verifier used by the in-process scorer (timeouts updated to the caller's; a new
    memory limit holds from the subprocess's next start)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifier(timeout_s, kill_grace_s, startup_timeout_s, memory_mb, group_timeout_s)
            atexit.register(_default.close)
        _default.timeout_s, _default.kill_grace_s, _default.group_timeout_s = timeout_s, kill_grace_s, group_timeout_s
        _default.startup_timeout_s, _default.memory_mb = startup_timeout_s, memory_mb
        return _default
