"""Run untrusted, model-written Python against tests, in a subprocess sandbox (DESIGN.md §7).

Threat model
------------
The program is adversarial by assumption: an RL policy is optimised to find whatever earns reward,
and a model can emit anything. We defend the *host* (the reward worker, other sandboxes, the
machine) and the *verdict*; we do not stop the program from computing, or from reading the system's
own files (/usr, /etc, the Python installation).

Guaranteed where we run as root with namespaces (checked by tests/unit/test_rewards_sandbox*.py; each
SandboxResult.isolation says what was in force), and, but for the throwaway uid and the cgroup, as an
ordinary user with unprivileged user namespaces (below; tests/unit/test_rewards_sandbox_identities.py
runs the escapes as both); rewards.code_isolation refuses code rewards where the walls are missing:
  * no network: a fresh network namespace whose only device, loopback, is down, and no socket
    families but AF_UNIX, AF_INET and AF_INET6 (the filter below): AF_VSOCK, which no network
    namespace covers, would reach the hypervisor host of a VM;
  * no secrets from the environment: the launcher starts with a fixed minimal env (nothing is
    inherited from the worker) and the program runs as a throwaway uid in its own pid namespace with
    a fresh /proc, so neither os.environ nor /proc/<pid>/environ of the worker is reachable;
  * no answers on disk ("rootfs"): in a private mount namespace the program's root is minimal and
    read-only (rewards/sandbox/fs.py): /usr, /etc, the merged-/usr links, the Python installation at
    its own path, /dev/{null,zero,full,random,urandom}, a fresh /proc and private tmpfs. The checkout
    (datasets with gold answers such as rewards/eval_data, run directories, the default world cache),
    $LAGRL_CACHE, configured data paths, home directories and everything else of the host are absent;
    where one of them, or a path of RewardConfig.code_hidden_paths, lies inside what is shown, an empty
    read-only mount covers it (see hidden_paths; the Python installation itself stays visible);
  * no writes outside the sandbox: the random unprivileged uid cannot write root-owned paths, the root
    is read-only, and the only writable directories (/tmp, /var/tmp, /dev/shm) are private, size-capped
    tmpfs that vanish with the sandbox; the host-side temporary directory is removed afterwards;
  * bounded time: a wall-clock limit per test enforced by the sandbox's init, RLIMIT_CPU as a
    backstop, no test run after `max_timeouts` of them timed out (the code reward's cap:
    code_max_timeouts, or 1 when all or nothing) or once the tests together took `total_s` (the code
    reward's code_response_timeout_s: a program ending each test just inside its limit counts no
    timeout), and an overall deadline here after which the launcher's session is SIGKILLed;
  * bounded memory, per sandbox as a whole: the launcher is moved into a fresh memory cgroup (limit
    = memory_mb, no swap) before it forks anything, so the kernel charges everything the program
    holds, including memory no process maps (memfd and tmpfs files, SysV segments, pipe and socket
    buffers), and refuses or OOM-kills at the limit; init reads the cgroup's limit-hit and OOM-kill
    counters after each test. Beside it, RLIMIT_AS per process, and a watchdog every 20 ms (and once
    when the test's main process ends) summing the RSS of the program's processes, the bytes parked
    in unix-socket buffers of the sandbox's network namespace ("sockmem", via sock_diag) and, without
    a private /dev/shm, what the sandbox's uids own in the host's ("shm-files"), so the limit holds
    where no cgroup can be made ("cgroup" missing from `isolation`). At the cgroup's limit the
    kernel's OOM killer takes the program first and never the launcher or init. A test's memory
    includes files the earlier tests of the same run left in /tmp;
  * a system-call filter (seccomp, installed on init and inherited by every process of the sandbox):
    memfd_create and SysV / POSIX-mqueue IPC are refused (memory outside any process), so are
    unshare, setns and clone with namespace flags (no user namespaces, no new kernel surface),
    ptrace and process_vm_*, and kernel interfaces no test needs (bpf, perf, io_uring, keyrings,
    userfaultfd, mount, modules...), and so is changing RLIMIT_CORE, which init sets to 1: the kernel's
    "no core dump", also to a core_pattern pipe (with 0, each crash of a program the sandbox exec'd
    starts the host's systemd-coredump or apport as root, outside every limit); see
    rewards/sandbox/seccomp.py;
  * bounded CPU rate ("cpu"): the same cgroup carries a CPU quota of `cpus` cores (cgroup v2 cpu.max,
    or a twin cgroup in the v1 cpu hierarchy) where the cpu controller can be used, so the program's
    threads and processes together cannot take more than that from the host, however many it starts;
  * bounded processes: RLIMIT_NPROC on a uid nothing else uses (the kernel stops a fork bomb at the
    cap), plus a process-count check in the same watchdog;
  * bounded output: RLIMIT_FSIZE on the capture files, so a print loop fails at the cap instead of
    growing; the host receives at most the cap per test (stderr: its last 8 KiB), and the return
    values of a response's call tests hold at most 2^20 values together (each value is an object in
    the worker: 1 MiB of `[[], [], ...]` per test was ~20x that there, rewards/sandbox/init.py);
  * nothing survives: init is pid 1 of the namespace, so when it exits the kernel kills every process
    left, including ones that called setsid(); between tests init kill(-1)s the namespace; the
    cgroup is emptied (SIGKILL) and removed last;
  * the host cannot be killed from inside: the program's parent is init (root, pid 1, immune to
    signals from inside its namespace) and the worker lives in another pid namespace;
  * judged where the program cannot reach: expected outputs never enter the sandbox; stdout and
    call-test return values (plain data only: an object with `__eq__` returning True is refused) are
    compared here. Assert tests run in a judge process of their own (rewards/sandbox/judge.py):
    another private uid, not dumpable, the test code read from a descriptor only it holds (never in
    the memory the program's process inherits from init); the program's process only answers its
    calls with plain data over a socketpair, and the verdict is written where only the judge and
    init can reach. Two objects of the program are never compared by the judge (`==` between them
    fails the test): their equality would be the program's own claim, e.g. a `Point` class whose
    constructor always returns one object. Walking frames, patching builtins, json or the harness, sys.settrace and gc
    scans all act on a process whose say no longer counts.
Limits are applied in a child forked by the launcher, not with Popen(preexec_fn=...): preexec_fn
is unsafe in threaded processes such as Ray actors, and the worker only ever spawns the launcher.

Residual risks (not defended): kernel exploits through the calls the filter allows (no VM);
reading what the minimal root shows (/usr, /etc, the Python installation: here a venv inside the
checkout, bound alone, whose packages hold no answers); CPU contention with the host up to the
quota, and without limit where there is no cpu controller ("cpu" missing from `isolation`); an assert test that judges with a function the *program* defines trusts it (so does a container
comparison of program objects, `[f(a)] == [Point(1, 2)]`, where Python checks identity before `==`), and a
program name never shadows a builtin or prelude name in the judge. Assert-test semantics that
change: values cross the process boundary as plain data (list vs tuple kept exact), test-side
functions or objects cannot be passed to the program (the test fails), containers passed in are
updated in place after each call, and a plain-data global of the program is read once, when the test
starts.

As an ordinary user ("userns" in `isolation`): the launcher unshares a user namespace together with the
mount, network, pid and ipc ones and maps the user's own uid and gid (the one mapping it may write), so
the program gets the same root, network, pid and ipc walls, the same filter, and no capability (each
forked process drops them all: child.drop_capabilities). What differs: there is no throwaway uid, so the
program shares the user's uid with init and the judge. What that uid would have protected is protected
otherwise: init is not dumpable (its descriptors and memory, which hold the report pipe and the assert
tests' code, are out of the program's reach through /proc), the capture files are unlinked as soon as
they are opened (no path to another test's input or to the judge's verdict), pid 1 of a namespace
ignores signals from inside it, and the judge is not dumpable (the program can kill it: its test then
fails). Without root there is usually no cgroup: memory is bounded by RLIMIT_AS per process and the
RSS watchdog (with "sockmem"; memfd and SysV memory are refused by the filter; the private tmpfs have
fixed sizes), processes by RLIMIT_NPROC, which counts per user namespace on Linux 5.14+ (before, the
runner counts the user's tasks on the host and adds them), and CPU by RLIMIT_CPU per process only
("cpu" missing: a parallel busy loop can use up to max_procs cores until the test's wall clock ends).
Fallbacks, reported in `isolation`: without namespaces (code_use_namespaces=False, or a container
without CAP_SYS_ADMIN) there is NO network isolation, NOTHING IS HIDDEN ("rootfs" missing: the
checkout, datasets, run directories and caches are readable wherever file permissions let any user
read them), world-writable host directories are writable
(what the sandbox's uid leaves there is removed afterwards; its /dev/shm files count as memory,
its /tmp files only against RLIMIT_FSIZE each), unix-socket buffers are counted only by a cgroup,
cleanup relies on process-tree/uid sweeps, and if the interpreter lives where the private uid cannot
read it (e.g. under /root) common stdlib modules are preloaded and other imports fail
("preloaded-stdlib"). Without root and without user namespaces (code_isolation "weak" only) there
is no wall at all between the program and the user: it can signal every process of the user
(os.kill(-1, 9) ends the run), read /proc/<pid>/environ of them, and read and write the user's files.
Without a seccomp table for the machine's architecture (x86-64 and arm64 are built in) "seccomp" is
missing from `isolation`.

Cost: one launcher per program (~55-130 ms: Python start-up, psutil import, namespace and mount
setup, the filter; the cgroup move overlaps the start-up) and one fork per test (~5-10 ms; an assert
test forks its judge too and pays a socket round trip per call into the program); see
bench/reward_throughput.py.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from rewards.sandbox import cgroup as sandbox_cgroup
from rewards.sandbox import fs as sandbox_fs

INIT_SCRIPT = str(Path(__file__).with_name("init.py"))     # run as `python -I init.py`: the launcher's code
_CHECKOUT = str(Path(__file__).resolve().parents[2])
# The launcher's (and so the program's) whole environment: nothing is inherited from the worker.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/tmp",
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 4.0        # wall clock per test
    memory_mb: int = 1024         # RLIMIT_AS per process and RSS of the test's process tree
    max_output_bytes: int = 1 << 20  # stdout and the return-value record (stderr: last 8 KiB)
    max_procs: int = 32           # RLIMIT_NPROC for the sandbox uid
    tmpfs_mb: int = 64            # private /tmp (and working directory) size
    namespaces: bool = True       # False: fallback path (no network isolation), for tests
    memory_cgroup: bool = True    # False: no per-sandbox cgroup (the seccomp + RSS path), for tests
    hidden_paths: tuple[str, ...] = ()  # also hidden where the minimal root shows their surroundings
    cpus: float | None = 1.5      # CPU quota of the whole sandbox, in cores (in its cgroup; None: none)
    # after this many tests time out, run no more: the rest count as timed out. A program that hangs on
    # every test would otherwise hold its group for tests x timeout seconds (64 x 4 s a response at the
    # defaults), long enough to go stale and so escape its negative reward; None: run every test
    max_timeouts: int | None = None
    # wall clock of all the tests together: once spent, the test running is stopped as timed out and the
    # rest are not run (they count as timed out). One that ends each test just inside timeout_s never
    # counts a timeout, so max_timeouts alone does not bound it; None: no such budget
    total_s: float | None = None


@dataclass(frozen=True)
class CodeTest:
    """stdio: run the program with `stdin`; call: `fn_name(*args)`; assert: run `code` after the program.
    Expected outputs are deliberately absent: they never enter the sandbox (see rewards.code_reward)."""

    kind: Literal["stdio", "call", "assert"]
    stdin: str = ""
    fn_name: str = ""
    args: list = field(default_factory=list)
    code: str = ""


@dataclass(frozen=True)
class SandboxResult:
    """One test's run. `success`: ran to completion (exit 0, no timeout/memory kill, test body done);
    whether the output is *right* is the caller's judgement. `value` is a call test's return value
    (plain JSON data) when `has_value`."""

    success: bool
    stdout: str
    stderr: str
    error: str = ""
    timeout: bool = False
    memory_exceeded: bool = False
    output_truncated: bool = False
    returncode: int | None = None
    value: Any = None
    has_value: bool = False
    duration_s: float = 0.0
    isolation: tuple[str, ...] = ()


def check_syntax(code: str) -> str | None:
    """None if `code` compiles to a Python AST, else a one-line reason (checked before any process starts)."""
    try:
        ast.parse(code)
        return None
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"[:200]


def run_code(code: str, stdin: str = "", limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    return run_tests(code, [CodeTest("stdio", stdin=stdin)], limits)[0]


def run_tests(code: str, tests: Sequence[CodeTest], limits: SandboxLimits = SandboxLimits()) -> list[SandboxResult]:
    """Run every test against `code` in one sandbox (one launcher, a fresh forked process per test)."""
    if not tests:
        return []
    base = tempfile.mkdtemp(prefix="lagrl-sbx-")
    os.chmod(base, 0o711)
    uid = 100_000 + secrets.randbelow(1 << 24) if os.geteuid() == 0 else None  # the judge's: uid + 2**24
    deadline = len(tests) * (limits.timeout_s + 1.0) + 20.0  # start-up + per-test kill/reap slack
    proc, report, cgroup = None, None, None
    try:
        job = {"code": code, "tests": [_test_entry(t, i, base) for i, t in enumerate(tests)],
               "timeout_s": limits.timeout_s, "memory_mb": limits.memory_mb,
               "max_output_bytes": limits.max_output_bytes, "max_procs": limits.max_procs,
               "tmpfs_mb": limits.tmpfs_mb, "namespaces": limits.namespaces, "uid": uid, "base": base,
               "hidden": hidden_paths(limits), "max_timeouts": limits.max_timeouts, "total_s": limits.total_s,
               "user_tasks": _user_tasks() if uid is None and not sandbox_fs.NPROC_PER_USERNS else 0}
        cgroup = sandbox_cgroup.create(limits.memory_mb << 20, limits.cpus) if limits.memory_cgroup else None
        proc = subprocess.Popen([sys.executable, "-I", INIT_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=base, env=dict(_ENV), start_new_session=True,
                                close_fds=True)
        # Into the cgroup while its interpreter starts (a cgroup move waits out an RCU grace period, ~15 ms
        # on a quiet machine, hidden here), and before it reads the job: everything it forks is born inside.
        if cgroup is not None and not sandbox_cgroup.adopt(cgroup, proc.pid):
            sandbox_cgroup.remove(cgroup)
            cgroup = None
        job["cgroup"] = cgroup
        job["cpu"] = cgroup is not None and sandbox_cgroup.cpu_limited(cgroup)
        try:
            out, err = proc.communicate(json.dumps(job).encode(), timeout=deadline)
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            proc.communicate()
            return [_failed(f"sandbox exceeded its overall deadline of {deadline:g} s", timeout=True)] * len(tests)
        try:
            report = _parse_report(out)
        except ValueError:
            tail = err.decode("utf-8", "replace")[-500:]
            return [_failed(f"sandbox launcher died (exit {proc.returncode}): {tail}")] * len(tests)
    finally:
        if proc is not None:
            _kill_session(proc.pid)
        isolation = () if report is None else report.get("isolation", ())
        uids = () if uid is None else (uid, uid + (1 << 24))  # the program's and the judge's
        if "pid" not in isolation:
            for u in uids:
                _sweep_uid(u)  # no pid namespace to take the stragglers down with it
        if "mount" not in isolation:
            _sweep_files(uids)  # no private tmpfs: what the sandbox left in the host's is ours to remove
        if cgroup is not None:
            sandbox_cgroup.remove(cgroup)  # kills anything still inside first
        shutil.rmtree(base, ignore_errors=True)
    if "fatal" in report:
        # Before any program ran, the fault is the sandbox's or the spec's (rewards.code_reward dead-letters the
        # group); during a test the program may have caused it, so the tests count as failed.
        during = report.get("phase", "setup")
        what = "sandbox setup failed" if during == "setup" else f"sandbox failed during {during}"
        return [_failed(f"{what}: {report['fatal']}")] * len(tests)
    iso = tuple(report["isolation"])
    results = report["tests"]
    timed_out = sum(r["timeout"] for r in results)
    stopped = report.get("stopped", "")
    if len(results) != len(tests) and not _stopped_early(stopped, results, len(tests), limits):
        return [_failed(f"sandbox reported {len(results)} results for {len(tests)} tests")] * len(tests)
    ran = [_result(t, r, iso) for t, r in zip(tests, results)]
    if stopped == "total_s":
        why = f"the response's tests used its {limits.total_s:g} s (total_s) by the end of test {len(ran) - 1}"
    else:
        why = f"{timed_out} test(s) timed out, the last test {len(ran) - 1} (max_timeouts)"
    return ran + [_failed(f"not run: {why}", timeout=True)] * (len(tests) - len(ran))


def _stopped_early(stopped: str, results: list[dict], n_tests: int, limits: SandboxLimits) -> bool:
    """init ran fewer than all the tests for a limit this run set: for max_timeouts, the count of timed-out
    tests, the last among them, bears it out; for total_s, init's own clock is the measure (the program
    cannot write the report: it comes from init, before and after each forked test)."""
    if not 0 < len(results) < n_tests:
        return False
    if stopped == "max_timeouts":
        return results[-1]["timeout"] and sum(r["timeout"] for r in results) == limits.max_timeouts
    return stopped == "total_s" and limits.total_s is not None


def _parse_report(out: bytes) -> dict:
    """init's report: one JSON line, then each test's raw stdout (its length in "stdout_bytes"), decoded
    here from a view of `out`, without a copy (see init._write_report). ValueError if malformed."""
    end = out.find(b"\n")
    try:
        report = json.loads(out if end < 0 else out[:end])
    except RecursionError as e:  # init bounds what the program can nest (init._read_record); never raise here
        raise ValueError(f"report nested too deeply: {e}") from None
    view, offset = memoryview(out)[end + 1:], 0
    for test in report.get("tests", ()):
        size = test.pop("stdout_bytes")
        if type(size) is not int or not 0 <= size <= len(view) - offset:
            raise ValueError("stdout lengths do not match the report")
        test["stdout"] = str(view[offset:offset + size], "utf-8", "replace")
        offset += size
    return report


def hidden_paths(limits: SandboxLimits) -> list[str]:
    """Paths covered inside the sandbox's root wherever it would show them: this checkout (datasets with
    gold answers, run directories, the default world cache), $LAGRL_CACHE and limits.hidden_paths. The
    minimal root shows only the system trees and the Python installation, so these matter where they
    lie inside one of those; the Python installation itself is never covered."""
    paths = (_CHECKOUT, os.environ.get("LAGRL_CACHE", ""), *limits.hidden_paths)
    return sorted({os.path.realpath(os.path.expanduser(p)) for p in paths if p})


def _test_entry(test: CodeTest, index: int, base: str) -> dict:
    """The test as the launcher sees it. An assert test's code goes to a root-only file instead: init
    opens and unlinks it and only the judge reads it, so neither init's memory (which every forked
    program process inherits) nor any path holds the assertions and their expected values."""
    entry = asdict(test)
    if test.kind == "assert":
        os.makedirs(os.path.join(base, "judge"), mode=0o700, exist_ok=True)
        path = os.path.join(base, "judge", str(index))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(entry.pop("code"))
        entry["code_path"] = path
    return entry


def _result(test: CodeTest, r: dict, isolation: tuple[str, ...]) -> SandboxResult:
    verdict = r["verdict"] or {}
    status = verdict.get("status")
    if r["timeout"]:
        error = "timeout"
    elif r["memory"]:
        error = "memory limit exceeded"
    elif r["procs"]:
        error = "process limit exceeded"
    elif r["signal"] is not None:
        error = f"killed by signal {_signal_name(r['signal'])}"
    elif status is None:
        # A stdio program that ends with os._exit(0) (the fast-exit idiom, after flushing) skips the
        # harness's record but has exited normally: its stdout, judged outside, is its answer.
        ok = test.kind == "stdio" and r["exit"] == 0
        error = "" if ok else f"exited (code {r['exit']}) before the harness finished"
    elif status != "ok":
        error = verdict.get("error", status)
    elif r["exit"] != 0:
        error = f"exit code {r['exit']}"
    else:
        error = ""
    return SandboxResult(success=not error, stdout=r["stdout"], stderr=r["stderr"], error=error,
                         timeout=r["timeout"], memory_exceeded=r["memory"], output_truncated=r["truncated"],
                         returncode=r["exit"], value=verdict.get("value"),
                         has_value=status == "ok" and "value" in verdict, duration_s=r["duration"],
                         isolation=isolation)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def _failed(error: str, timeout: bool = False) -> SandboxResult:
    return SandboxResult(success=False, stdout="", stderr="", error=error, timeout=timeout)


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # launcher's own session: nothing of the worker is in it
    except (ProcessLookupError, PermissionError):
        pass


def _sweep_uid(uid: int | None) -> None:
    """Fallback cleanup (no pid namespace): kill anything still running as this sandbox's private uid."""
    if uid is None:
        return
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] and p.info["uids"].real == uid:
                p.kill()
        except psutil.Error:
            pass


_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def _sweep_files(uids: tuple[int, ...]) -> None:
    """Fallback cleanup (no mount namespace): remove what the sandbox's private uids own in the
    host's world-writable directories (shm_open files, temporary files). Nothing else has those uids."""
    for directory in _WORLD_WRITABLE:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid not in uids:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _user_tasks() -> int:
    """Tasks (threads included) of this uid on the host: what RLIMIT_NPROC counts beside the sandbox's own on
    kernels before 5.14, which init cannot see from inside its pid namespace."""
    uid = os.getuid()
    return sum(p.info["num_threads"] or 1 for p in psutil.process_iter(["uids", "num_threads"])
               if p.info["uids"] and p.info["uids"].real == uid)


def sweep_stale_cgroups() -> int:
    """Remove the sandbox cgroups of workers that died before removing their own (rewards/sandbox/cgroup.py);
    called when a reward worker starts. -> how many."""
    return len(sandbox_cgroup.sweep_stale())


def isolation_report(limits: SandboxLimits = SandboxLimits()) -> tuple[str, ...]:
    """What this host grants (e.g. ('net', 'mount', 'pid', 'ipc')), by running a trivial program."""
    return run_code("pass", limits=limits).isolation
