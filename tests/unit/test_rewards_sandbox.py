"""Code sandbox: one adversarial test per property of the threat model (rewards/sandbox/runner.py docstring).

Each test checks the attack is contained *and* the host is left healthy: no process of a sandbox uid
survives, the test process is alive, its memory did not balloon.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from rewards.code_reward import limits_from
from rewards.config import RewardConfig
from rewards.sandbox import CodeTest, SandboxLimits, check_syntax, isolation_report, run_code, run_tests
from tests.unit.sandbox_checks import host_stays_healthy  # noqa: F401 - autouse: nothing of a sandbox survives a test

LIMITS = SandboxLimits(timeout_s=1.0, memory_mb=256, max_output_bytes=4096, max_procs=16)
FALLBACK = SandboxLimits(timeout_s=1.0, memory_mb=256, max_output_bytes=4096, max_procs=16, namespaces=False)
ISOLATED = isolation_report(LIMITS)
needs_ns = pytest.mark.skipif(not {"net", "pid", "mount"} <= set(ISOLATED),
                              reason=f"host grants no namespaces (got {ISOLATED})")


def src(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the private uid needs root; isolation_report says what is in force")
def test_isolation_on_this_host():
    assert "uid" in ISOLATED          # as root every program runs as a throwaway uid


@pytest.mark.parametrize("limits", [LIMITS, FALLBACK], ids=["ns", "fallback"])
def test_infinite_loop_is_killed(limits):
    start = time.monotonic()
    r = run_code("while True:\n    pass\n", limits=limits)
    assert r.timeout and not r.success and r.error == "timeout"
    # killed at its own timeout, not at the sandbox's overall deadline (timeout + 21 s for one test); the
    # slack is for a loaded machine (10 s seen with a full test run beside it)
    assert time.monotonic() - start < limits.timeout_s + 12


@pytest.mark.parametrize("limits", [LIMITS, FALLBACK], ids=["ns", "fallback"])
def test_fork_bomb_is_contained(limits):
    n_before = len(psutil.pids())
    r = run_code(src("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """), limits=limits)
    assert not r.success and (r.timeout or r.memory_exceeded or "process limit" in r.error)
    assert len(psutil.pids()) < n_before + 20  # other engineers share the machine: allow a little noise


def test_setsid_escapee_dies_with_the_sandbox():
    r = run_code(src("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(60)
        print("parent done")
    """), limits=LIMITS)
    assert r.success and r.stdout == "parent done\n"
    # host_stays_healthy checks that the sleeping grandchild is gone


@pytest.mark.parametrize("program", [
    "x = bytearray(10 ** 10)\n",                                          # one huge allocation
    "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))\n",  # creeping growth
    src("""
        import os, time
        for _ in range(3):                        # each process stays under RLIMIT_AS,
            if os.fork() == 0:                    # the tree does not: the psutil watchdog
                break
        block = bytearray(150 * 2 ** 20)
        time.sleep(5)
    """),
], ids=["single", "creeping", "process-tree"])
def test_memory_bomb_is_stopped(program):
    # A roomy clock: the memory limit is under test, and at load 7-11 the creeping bomb missed it in 1 s.
    r = run_code(program, limits=replace(LIMITS, timeout_s=10.0))
    assert r.memory_exceeded and not r.success, r


@needs_ns
def test_writes_outside_the_sandbox_do_not_reach_the_host():
    host_tmp = os.path.join(tempfile.gettempdir(), f"lagrl-escape-{uuid.uuid4().hex}")
    repo_file = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "ESCAPED")
    before = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("lagrl-sbx-")}
    r = run_code(src(f"""
        import os
        open({host_tmp!r}, "w").write("x")      # world-writable on the host: a private tmpfs here
        open("in_cwd.txt", "w").write("ok")       # the working directory is writable
        print(os.getcwd())
        try:
            open({repo_file!r}, "w")
        except OSError:                   # EROFS: the checkout is absent from a read-only root
            print("repo read-only")
    """), limits=LIMITS)
    assert r.success, r
    assert "repo read-only" in r.stdout
    assert not os.path.exists(host_tmp) and not os.path.exists(repo_file)
    assert not os.path.exists(r.stdout.splitlines()[0]) or r.stdout.startswith("/tmp/sbx")
    after = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("lagrl-sbx-")}
    assert after <= before  # the host-side temporary directory was removed


ANSWERS = Path(__file__).resolve().parents[2] / "rewards" / "eval_data" / "aime24.jsonl"  # AIME golds
READ_ANSWERS = """
import os, sys
for path in PATHS:
    try:
        with open(path) as f:
            print("read", path, f.read(20)[:0])
    except OSError as e:
        print("hidden", path, type(e).__name__)
skip = {"/usr", "/etc", "/proc", "/dev", os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
for top, dirs, files in os.walk("/"):        # whatever else the root shows: no dataset anywhere
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip]
    for f in files:
        if f.endswith((".jsonl", ".parquet")):
            print("found", os.path.join(top, f))
"""


@needs_ns
def test_answers_on_disk_are_hidden():
    """Gold answers on disk are out of the program's reach: the checkout (rewards/eval_data holds the
    AIME answers), and a configured data directory even where the minimal root shows its surroundings
    (here inside the Python installation, which stays visible: without the setting it is readable)."""
    assert ANSWERS.is_file()
    data = Path(tempfile.mkdtemp(prefix="lagrl-test-data-", dir=sys.prefix))
    try:
        data.chmod(0o755)
        gold = data / "gold.jsonl"
        gold.write_text('{"answer": "204"}\n')
        program = READ_ANSWERS.replace("PATHS", repr((str(ANSWERS), str(gold))))
        slack = SandboxLimits(timeout_s=10.0, memory_mb=256, max_output_bytes=4096, max_procs=16)
        shown = run_code(program, limits=slack)
        configured = RewardConfig(code_test_timeout_s=10.0, code_memory_mb=256, code_hidden_paths=(str(data),))
        hidden = run_code(program, limits=limits_from(configured))
    finally:
        shutil.rmtree(data)
    assert hidden.success and "rootfs" in hidden.isolation, hidden
    assert hidden.stdout.split("\n")[:2] == [f"hidden {ANSWERS} FileNotFoundError", f"hidden {gold} FileNotFoundError"]
    assert "found" not in hidden.stdout, hidden.stdout
    assert shown.success and f"read {gold}" in shown.stdout, shown  # the setting is what hid it


@pytest.mark.parametrize("limits", [FALLBACK, replace(FALLBACK, memory_cgroup=False)], ids=["fallback", "bare"])
def test_without_a_mount_namespace_the_report_says_files_are_visible(limits):
    r = run_code(READ_ANSWERS.replace("PATHS", repr((str(ANSWERS),))).split("skip =")[0], limits=limits)
    assert r.success and "rootfs" not in r.isolation, r  # nothing hidden, and the report says so


@pytest.mark.parametrize("limits", [LIMITS, FALLBACK], ids=["ns", "fallback"])
def test_environment_secrets_are_not_visible(limits, monkeypatch):
    monkeypatch.setenv("LAGRL_FAKE_SECRET", "s3cr3t-value")
    r = run_code(src(f"""
        import os
        print(dict(os.environ))
        for pid in (os.getppid(), 1, {os.getpid()}):
            try:
                print(open(f"/proc/{{pid}}/environ", "rb").read())
            except OSError as e:
                print("denied", pid, type(e).__name__)
    """), limits=limits)
    assert r.success, r
    assert "s3cr3t" not in r.stdout and "LAGRL_FAKE_SECRET" not in r.stdout


@needs_ns
def test_network_is_unreachable():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        r = run_code(src(f"""
            import socket
            for addr in (("127.0.0.1", {port}), ("1.1.1.1", 53)):
                try:
                    socket.create_connection(addr, timeout=0.5)
                    print("connected", addr)
                except OSError as e:
                    print("failed", type(e).__name__)
        """), limits=LIMITS)
        with pytest.raises(TimeoutError):
            server.accept()
    assert r.success, r
    assert "connected" not in r.stdout and r.stdout.count("failed") == 2


@pytest.mark.parametrize("limits", [LIMITS, FALLBACK], ids=["ns", "fallback"])
def test_killing_the_parent_does_not_reach_the_host(limits):
    me = os.getpid()
    r = run_code(src(f"""
        import os, signal
        for target in (os.getppid(), {me}, 1):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError as e:
                print("refused", target, type(e).__name__)
        try:
            os.kill(-1, signal.SIGKILL)   # all it may signal: only its own uid's processes (not itself)
        except OSError:
            pass
    """), limits=limits)
    assert r.stdout.count("refused") == 3, r  # parent (init or launcher), the host, pid 1: all EPERM
    assert psutil.pid_exists(me)


def test_cpu_rate_is_bounded_by_the_quota():
    """Two busy processes for 1.5 s of wall clock get at most the sandbox's quota (0.1 core) between them."""
    r = run_code(src("""
        import os, time
        start = time.monotonic()
        pids = [os.fork() for _ in range(2)]
        if 0 in pids:
            while time.monotonic() < start + 1.5:
                pass
            os._exit(0)
        for pid in pids:
            os.waitpid(pid, 0)
        t = os.times()
        print(t.children_user + t.children_system, time.monotonic() - start)
    """), limits=replace(LIMITS, timeout_s=10.0, cpus=0.1))
    if "cpu" not in r.isolation:
        pytest.skip(f"no usable cpu controller here (got {r.isolation})")
    used, wall = map(float, r.stdout.split())
    assert r.success and used <= 0.1 * wall + 0.2, (used, wall)


def test_huge_stdout_is_capped():
    start = time.monotonic()
    r = run_code("while True:\n    print('x' * 10000)\n", limits=LIMITS)
    assert r.output_truncated and len(r.stdout) <= LIMITS.max_output_bytes and not r.success
    assert time.monotonic() - start < 5


def test_tests_are_isolated_from_each_other():
    code = src("""
        import os, sys
        def f(x):
            return x * 2
        print(sorted(os.listdir(".")))
        open(f"mark{len(os.listdir('.'))}", "w")
    """)
    runs = run_tests(code, [CodeTest("call", fn_name="f", args=[2]), CodeTest("assert", code="assert f(3) == 6"),
                            CodeTest("stdio", stdin="")], LIMITS)
    assert [r.success for r in runs] == [True, True, True]
    assert runs[0].value == 4 and runs[0].has_value


def test_syntax_precheck():
    assert check_syntax("def f(:\n") is not None
    assert check_syntax("(" * 10000) is not None  # deep nesting is an error, not a crash
    assert check_syntax("x = 1\n") is None
