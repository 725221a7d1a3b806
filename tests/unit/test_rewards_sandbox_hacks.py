"""Code sandbox vs a hostile policy, second review: what the first (test_rewards_sandbox_attacks.py) left
open. A stdio program is judged as `python solution.py` would run (exit idioms of competitive
programming keep their output), and what a program prints cannot multiply the reward worker's memory
on its way out of the sandbox. Every case runs real programs through the real sandbox; afterwards
nothing of it may survive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rewards.code_reward import score_code
from rewards.config import RewardConfig
from rewards.sandbox import CodeTest, SandboxLimits, run_tests
from tests.unit.sandbox_checks import host_stays_healthy  # noqa: F401 - autouse: nothing of a sandbox survives a test

CFG = RewardConfig(code_test_timeout_s=3.0, code_memory_mb=256)
LIMITS = SandboxLimits(timeout_s=3.0, memory_mb=256, max_output_bytes=4096, max_procs=16)
ADD_STDIO = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
ADD_CALL = json.dumps({"inputs": [[1, 2], [3, 4]], "outputs": [3, 7], "fn_name": "add"})
ADD_ASSERT = json.dumps({"asserts": ["assert add(1, 2) == 3", "assert add(3, 4) == 7"]})


def block(code: str) -> str:
    return f"```python\n{textwrap.dedent(code).strip()}\n```\n"


# --- stdio programs end the way the interpreter ends them -------------------------------------------------
# Each program is right, and was scored 0 before: the harness ended the process with os._exit right after
# the main module, so a non-daemon thread's output and atexit handlers never ran, and a program that itself
# left with os._exit(0) (after flushing) was a runtime error for lack of the harness's record.
RIGHT_STDIO = {
    "os-exit-after-flush": """
        import os, sys
        a, b = map(int, input().split())
        print(a + b)
        sys.stdout.flush()
        os._exit(0)""",
    "thread-main-not-joined": """
        import threading, time
        def main():
            time.sleep(0.3)                  # still running when the main module has ended
            a, b = map(int, input().split())
            print(a + b)
        threading.stack_size(1 << 26)        # the deep-recursion idiom
        threading.Thread(target=main).start()""",
    "atexit-writes-buffered-output": """
        import atexit, io, sys
        sys.stdout = io.StringIO()           # fast-output template: print into a buffer, write it at exit
        atexit.register(lambda: sys.__stdout__.write(sys.stdout.getvalue()))
        a, b = map(int, input().split())
        print(a + b)""",
}


@pytest.mark.parametrize("name", list(RIGHT_STDIO))
def test_stdio_programs_exit_as_under_the_interpreter(name):
    r = score_code(block(RIGHT_STDIO[name]), ADD_STDIO, CFG)
    assert (r.reward, r.reason) == (1.0, "correct"), r


# The same exits stay failures where they must: a non-zero os._exit in a stdio test; os._exit(0) or an
# atexit print before a call or assert test has run (leaving is not passing); a thread that never ends.
WRONG_EXITS = [
    ("a, b = map(int, input().split())\nprint(a + b)\nimport sys, os\nsys.stdout.flush()\nos._exit(3)",
     ADD_STDIO, "runtime_error"),
    ("import os\ndef add(a, b):\n    return a + b\nos._exit(0)", ADD_CALL, "runtime_error"),
    ("import os\ndef add(a, b):\n    os._exit(0)", ADD_CALL, "runtime_error"),
    ("import os\ndef add(a, b):\n    os._exit(0)", ADD_ASSERT, "runtime_error"),
    ("import atexit\natexit.register(print, 3)\ndef add(a, b):\n    return 0", ADD_CALL, "wrong"),
    ("import threading, time\nthreading.Thread(target=lambda: time.sleep(60)).start()\nprint(3)",
     json.dumps({"inputs": [""], "outputs": ["3"]}), "timeout"),
]


@pytest.mark.parametrize("program,spec,reason", WRONG_EXITS,
                         ids=["stdio-nonzero-os-exit", "call-os-exit-at-top", "call-os-exit-in-function",
                              "assert-os-exit-in-function", "call-atexit-print", "stdio-endless-thread"])
def test_leaving_early_still_fails(program, spec, reason):
    r = score_code(block(program), spec, CFG)
    assert (r.reward, r.reason) == (0.0, reason), r


# --- output on its way to the host ------------------------------------------------------------------------
def test_stdout_bytes_reach_the_host_exactly():
    """NUL, control bytes, invalid UTF-8 (replaced), newlines and an unterminated line, per test, in order."""
    program = textwrap.dedent("""
        import os, sys
        n = int(sys.stdin.read() or 0)
        os.write(1, [b"", b"a\\x00b\\x01\\n\\xff\\xfec", b"\\n" * 3, "é€".encode() * 100][n])
    """)
    runs = run_tests(program, [CodeTest("stdio", stdin=str(i)) for i in range(4)], LIMITS)
    assert [r.stdout for r in runs] == ["", "a\x00b\x01\n\ufffd\ufffdc", "\n\n\n", "é€" * 100], runs
    assert all(r.success for r in runs), runs


HOST_BUFFER = """
import json, resource, sys
from rewards.sandbox import CodeTest, SandboxLimits, run_tests
program = "import os\\nos.write(1, b'\\\\x01' * (1 << 20))\\n"   # 1 MiB of a byte JSON writes as 6
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
runs = run_tests(program, [CodeTest("stdio")] * 8, SandboxLimits(timeout_s=5.0, memory_mb=512, max_output_bytes=1 << 20))
assert all(len(r.stdout) == 1 << 20 for r in runs), [r.error for r in runs]
print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) << 10))
"""


def test_control_bytes_do_not_multiply_the_workers_memory():
    """8 tests x 1 MiB of b"\\x01" (the output cap): the worker's memory grows by a small multiple of the
    8 MiB printed. Through JSON each byte was six (`\\u0001`), buffered, joined and parsed: ~150 MiB
    here, ~1.25 GiB for one response at the defaults (64 tests); now the bytes travel raw."""
    out = subprocess.run([sys.executable, "-c", HOST_BUFFER], capture_output=True, text=True, timeout=120,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    growth = json.loads(out.strip().splitlines()[-1])
    assert growth < 5 * 8 << 20, f"the worker grew by {growth >> 20} MiB for 8 MiB of output"


VALUES_BUFFER = """
import json, resource, sys
from rewards.sandbox import CodeTest, SandboxLimits, run_tests
program = "def f(x):\\n    return [[] for _ in range(250_000)]\\n"   # 1 MB of JSON, 250,001 values
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
runs = run_tests(program, [CodeTest("call", fn_name="f", args=[i]) for i in range(12)],
                 SandboxLimits(timeout_s=20.0, memory_mb=1024, max_output_bytes=1 << 20))
print(json.dumps({"growth": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) << 10,
                  "valued": [r.has_value and len(r.value) for r in runs], "errors": [r.error for r in runs]}))
"""


def test_return_values_of_tiny_containers_do_not_multiply_the_workers_memory():
    """12 call tests each returning 250,000 empty lists (1 MB of JSON, under the output cap): every list was
    an object in the reward worker, ~20x the bytes (measured: +161 MiB for 8 tests, +643 MiB for 32). The
    values of a response's tests now hold at most 2^20 values together: the first four tests' values
    arrive, the rest are invalid records that say why, and the worker grows by ~80 MiB."""
    out = subprocess.run([sys.executable, "-c", VALUES_BUFFER], capture_output=True, text=True, timeout=300,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["valued"] == [250_000] * 4 + [False] * 8, seen["errors"]
    assert all("more than 1048576 values" in e for e in seen["errors"][4:]), seen["errors"]
    assert seen["growth"] < 200 << 20, f"the worker grew by {seen['growth'] >> 20} MiB"


# --- an assert test's expected side made by the program ------------------------------------------------
# `assert mid(...) == Point(2, 2)`: both sides are objects of the program. The judge compared them by
# identity, so a Point whose constructor always returns one object scored 1.0 and a right answer with its
# own __eq__ scored 0. Now such a comparison fails the test for both: only the program could say.
POINT_SPEC = json.dumps({"asserts": ["assert mid(Point(0, 0), Point(4, 4)) == Point(2, 2)",
                                     "assert mid(Point(0, 0), Point(2, 0)) != Point(5, 5)",
                                     "assert mid(Point(0, 0), Point(2, 0)).x == 1"]})
ONE_POINT = """
    class Point:
        _one = None
        def __new__(cls, *a):
            if cls._one is None:
                cls._one = object.__new__(cls)
            return cls._one
    def mid(a, b):
        return Point()"""
RIGHT_POINT = """
    class Point:
        def __init__(self, x, y): self.x, self.y = x, y
        def __eq__(self, o): return (self.x, self.y) == (o.x, o.y)
    def mid(a, b): return Point((a.x + b.x) / 2, (a.y + b.y) / 2)"""


def test_program_objects_are_never_compared_by_the_judge():
    cheat, right = (score_code(block(p), POINT_SPEC, CFG) for p in (ONE_POINT, RIGHT_POINT))
    assert cheat.reward == 0.0 and cheat.reason == "wrong", cheat
    assert "UnjudgeableComparison" in cheat.detail, cheat.detail
    assert right.reward == pytest.approx(1 / 3), right      # only the test on plain data (.x == 1) judges


def test_the_program_yields_to_init_inside_the_cpu_quota():
    """The program runs at nice 10 under the sandbox's CPU quota, so a fork bomb's busy processes cannot starve
    init's watchdog (a 4 s test ended after 5-18 s on a busy host, 4.3-6.3 s at nice 10); with no quota the
    program keeps the host's priority. A program cannot raise its own priority back."""
    runs = run_tests("import os\nprint(os.nice(0))\ntry:\n    os.nice(-10)\nexcept OSError:\n    print('refused')",
                     [CodeTest("stdio")], LIMITS)
    ours = os.nice(0)                                   # the sandbox starts at the worker's niceness
    expected = f"{min(ours + 10, 19)}\nrefused\n" if "cpu" in runs[0].isolation else f"{ours}\n"
    assert runs[0].stdout.startswith(expected), (runs[0].stdout, runs[0].isolation)


# --- a record of the program's own making cannot crash the reward worker -----------------------------------
# The harness's per-test nonce sits in the memory of the program's process (stdio and call tests), so a
# program can write a record with it. Choosing its own value or "ok" gains nothing (the value is judged
# outside), but a record the harness never writes made score_code raise in the reward worker, and a group
# whose scoring raises is dead-lettered unjudged: a policy could escape a failing group's negative reward.
FORGE = """
import json, os, sys
record = json.loads({record!r})
record["nonce"] = sys._getframe(1).f_locals["nonce"]   # the harness's frame: _run(job, test, nonce, wire)
os.write(3, (json.dumps(record) + "\\n").encode())
os._exit(0)
"""
DEEP = '{"status": "ok", "value": ' + "[" * 950 + "]" * 950 + "}"
FORGED_RECORDS = {
    "error-not-a-string": '{"status": "exception", "error": [1]}',
    "status-not-a-string": '{"status": {"a": 1}}',
    "error-a-number": '{"status": "exception", "error": 5}',
    "value-nested-950-deep": DEEP,      # parsed by init, but not by a worker already ~50 frames deep
}


def _score_from_deep_stack(frames: int, text: str, spec: str):
    """score_code called `frames` calls down, as in a Ray actor's task (its stack is far from empty)."""
    return score_code(text, spec, CFG) if frames == 0 else _score_from_deep_stack(frames - 1, text, spec)


@pytest.mark.parametrize("spec", [ADD_CALL, ADD_STDIO], ids=["call", "stdio"])
@pytest.mark.parametrize("name", list(FORGED_RECORDS))
def test_forged_records_of_any_shape_score_zero(name, spec):
    r = _score_from_deep_stack(100, block(FORGE.format(record=FORGED_RECORDS[name])), spec)
    assert (r.reward, r.reason) == (0.0, "runtime_error"), r


# --- core dumps ---------------------------------------------------------------------------------------------
# A crash of a program the sandbox exec'd (its own processes are not dumpable after the uid drop) is a core
# dump. Where core_pattern is a pipe (systemd-coredump, apport), the kernel starts that helper on the host,
# as root, outside every namespace and limit, for each crash unless RLIMIT_CORE is exactly 1: a crash loop
# was host load nothing here bounded (0 stops file cores only). The program may not set it back to 0.
CORE = """
import os, resource, subprocess, sys
print(resource.getrlimit(resource.RLIMIT_CORE), resource.prlimit(0, resource.RLIMIT_CORE))
for call in (lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
             lambda: resource.prlimit(0, resource.RLIMIT_CORE, (0, 0))):
    try:
        call()
        print("lowered")
    except (OSError, ValueError) as e:   # setrlimit's EPERM is a ValueError in Python
        print("refused", getattr(e, "errno", None))
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))   # other limits may still be lowered
print(resource.getrlimit(resource.RLIMIT_NOFILE))
crash = subprocess.run([sys.executable, "-c", "import os; os.abort()"])
print(crash.returncode, sorted(f for f in os.listdir(".") if f.startswith("core")))
"""


def test_core_limit_is_one_and_stays_one():
    r = run_tests(CORE, [CodeTest("stdio")], LIMITS)[0]
    if "seccomp" not in r.isolation:
        pytest.skip(f"no system-call filter on this host (got {r.isolation})")
    assert r.success, r
    assert r.stdout.splitlines() == ["(1, 1) (1, 1)", "refused None", "refused 1", "(128, 128)", "-6 []"], r


# --- signals -------------------------------------------------------------------------------------------------
SIGNAL_PROOF = """
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGXCPU, signal.SIGVTALRM):
    signal.signal(s, signal.SIG_IGN)     # every catchable signal a timeout could be enforced with
signal.setitimer(signal.ITIMER_REAL, 0)
def add(a, b):
    while True:
        pass
if __name__ == "__main__":
    while True:
        pass
"""


@pytest.mark.parametrize("spec", [ADD_STDIO, ADD_CALL, ADD_ASSERT], ids=["stdio", "call", "assert"])
def test_a_program_ignoring_signals_still_times_out(spec):
    one = json.loads(spec)
    one = {k: v[:1] if isinstance(v, list) else v for k, v in one.items()}  # one test: one timeout to wait
    r = score_code(block(SIGNAL_PROOF), json.dumps(one), RewardConfig(code_test_timeout_s=1.0, code_memory_mb=256))
    assert (r.reward, r.reason) == (0.0, "timeout"), r
