"""The trusted side of the code sandbox, run as `python -I init.py` (threat model: rewards/sandbox/runner.py).

Reads one JSON job on stdin, writes one JSON report line on stdout, then the tests' raw stdout bytes
(see _write_report). Imports only the stdlib and psutil,
nothing from lagrl; its siblings are loaded by path: fs (namespaces, mounts), seccomp
(the system-call filter), cgroup (memory counters), child (the untrusted side),
judge and wire (assert tests). Shape of the process tree:

    reward worker ── launcher (this file, new session) ── init (pid 1 of a new pid namespace, root,
                                                           unkillable from inside, seccomp-filtered)
                                                            ├─ the program: one forked child per test
                                                            │  (cgroup, rlimits, private uid, no privileges)
                                                            └─ assert tests only: the judge, forked beside
                                                               it (another private uid), linked to it by
                                                               a socketpair; its verdict is the test's
Per test, init enforces the wall-clock limit and a psutil watchdog over its whole subtree (RSS and
process count), reads the sandbox cgroup's limit-hit and OOM-kill counters, then SIGKILLs everything
left (kill(-1) as pid 1 of the namespace; psutil + uid sweep without one). Without namespaces the
launcher itself plays init (a child subreaper, so orphans stay countable).
"""

import ctypes
import json
import math
import os
import resource
import secrets
import select
import signal
import socket
import sys
import time

import psutil

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
STDERR_TAIL = 8192
_libc = ctypes.CDLL(None, use_errno=True)


def _load(name: str):
    """A sibling module loaded by path: `python -I` keeps this directory off sys.path, and it should
    stay off (rewards/ module names could shadow real ones)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(me: psutil.Process) -> list[psutil.Process]:
    try:
        return me.children(recursive=True)
    except psutil.Error:
        return []


def _rss(procs) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _kill_everything(is_pid1: bool, uid) -> None:
    """Every process this sandbox started dies here, including ones that called setsid()."""
    if is_pid1:
        try:
            os.kill(-1, signal.SIGKILL)  # as pid 1 of the namespace: everyone in it but us
        except ProcessLookupError:
            pass
    else:
        me = psutil.Process()
        for _ in range(100):  # a fork bomb may be forking while we kill; each round shrinks it
            victims = _tree(me)
            if uid is not None:
                victims += [p for p in psutil.process_iter(["uids"]) if p.info["uids"]
                            and p.info["uids"].real == uid]
            if not victims:
                break
            for p in victims:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            _reap(block=False)
    _reap(block=True)


def _reap(block: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _read_capped(fd: int, cap: int, tail: bool = False) -> tuple[bytes, bool]:
    """At most `cap` bytes of the capture file `fd` (the first ones, or the last ones with `tail`), and
    whether there was more. By offset: the program's copy of the descriptor moved the shared one."""
    size = os.fstat(fd).st_size
    start = size - cap if tail and size > cap else 0
    chunks, want = [], min(cap + 1, size - start)
    while want > 0:
        chunk = os.pread(fd, want, start)
        if not chunk:
            break
        chunks.append(chunk)
        start, want = start + len(chunk), want - len(chunk)
    data = b"".join(chunks)
    return data[:cap], size > cap


def _capture(cap_dir: str) -> int:
    """A fresh read-write file that no path reaches: it is unlinked at once, so only descriptors hold it.
    Without a private uid the program shares init's uid, and a path in cap_dir would let it write a
    verdict of its own (its judge's, say) or read another test's input; init is not dumpable, so
    neither can it take init's descriptors through /proc."""
    path = os.path.join(cap_dir, secrets.token_hex(8))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    return fd


def _stdin_files(tests: list[dict], cap_dir: str) -> None:
    """Every test's stdin into its capture file, before any program runs: a stdin that does not fit is a
    setup failure (the spec's, not the program's), not the failure of a test whose /tmp the program
    filled beforehand."""
    for test in tests:
        fd = _capture(cap_dir)
        _write_all(fd, test.pop("stdin", "").encode("utf-8"))
        test["stdin_fd"] = fd


class _Siblings:
    """The modules loaded by path before the mounts (the checkout is out of the program's root afterwards); the
    judge's two only when the job has assert tests."""

    def __init__(self, judged: bool):
        for name in ("fs", "seccomp", "cgroup", "sockets", "child") + (("judge", "wire") if judged else ()):
            setattr(self, name, _load(name))
        if not judged:
            self.judge = self.wire = None


def _run_test(job, index: int, test: dict, work: str, cap_dir: str, is_pid1: bool, mods: _Siblings,
              unseen, budget: "_ValueBudget", ends: float) -> dict:
    """Run one test; its wall clock ends at timeout_s or at ``ends`` (the response's budget), the sooner."""
    stdin = test["stdin_fd"]
    os.lseek(stdin, 0, os.SEEK_SET)
    out, err, val = (_capture(cap_dir) for _ in range(3))
    nonce = secrets.token_hex(16)
    before = mods.cgroup.counters(job["cgroup"], job["cgroup_fd"]) if job["cgroup"] else (0, 0)
    sys.stdout.flush()
    start = time.monotonic()
    judge = None
    if test["kind"] == "assert":  # the program answers on a socketpair; the judge alone holds the verdict file
        ours, theirs = socket.socketpair()
        fds = [stdin, out, err, ours.fileno()]
        program = _fork(lambda: mods.child.run_child(job, test, fds, work, nonce, mods.wire))
        judge = _fork(lambda: mods.judge.run_judge(job, [stdin, err, err, val, theirs.fileno(), test["code_fd"]],
                                                   work, nonce, mods.child.confine, mods.child.PRELUDE, mods.wire))
        ours.close()
        theirs.close()
    else:
        program = _fork(lambda: mods.child.run_child(job, test, [stdin, out, err, val], work, nonce, mods.wire))
    main = judge or program
    stop, peak = _watch(main, min(start + job["timeout_s"], ends), job["memory_mb"] << 20, job["max_procs"], judge,
                        unseen)
    duration = time.monotonic() - start
    statuses = []
    if judge:  # before anything is killed: did the program's process end on its own (SIGXCPU, OOM kill)?
        ended, program_status = os.waitpid(program, os.WNOHANG)
        statuses = [program_status] if ended else []
    if stop:
        os.kill(main, signal.SIGKILL)
    _, status = os.waitpid(main, 0)  # the main process first: its status is the test's
    statuses.insert(0, status)
    _kill_everything(is_pid1, job["uid"])
    after = mods.cgroup.counters(job["cgroup"], job["cgroup_fd"]) if job["cgroup"] else (0, 0)
    cap = job["max_output_bytes"]
    stdout, out_trunc = _read_capped(out, cap)  # bytes: they travel raw, see _write_report
    stderr, _ = _read_capped(err, STDERR_TAIL, tail=True)  # diagnostics: the traceback end
    verdict = _read_record(val, cap, nonce, budget)
    for fd in (stdin, out, err, val):
        os.close(fd)
    xcpu = any(os.WIFSIGNALED(s) and os.WTERMSIG(s) == signal.SIGXCPU for s in statuses)
    killed = next((os.WTERMSIG(s) for s in statuses if os.WIFSIGNALED(s)), None)
    return {"exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, "signal": killed,
            "timeout": stop == "timeout" or xcpu, "procs": stop == "procs",
            "memory": stop == "memory" or after != before or (verdict or {}).get("status") == "memory",
            "peak_rss": peak, "duration": duration, "stdout": stdout, "stderr": stderr.decode("utf-8", "replace"),
            "truncated": out_trunc, "verdict": verdict}


def _fork(run) -> int:
    pid = os.fork()
    if pid == 0:  # never returns: run_child / run_judge end in os._exit
        try:
            run()
        finally:
            os._exit(111)
    return pid


def _read_record(fd: int, cap: int, nonce: str, budget: "_ValueBudget") -> dict | None:
    """The harness's (or the judge's) one-line record on fd 3; None if nothing was written. Anything
    else is an invalid verdict whose error says what the channel held. A return value is charged
    to the response's `budget`."""
    try:
        raw, truncated = _read_capped(fd, cap)
    except OSError as e:
        return {"status": "invalid", "error": f"the result channel could not be read: {e}"}
    lines = [line for line in raw.decode("utf-8", "replace").split("\n") if line.strip()]
    if not lines:
        return None
    if len(lines) > 1 or truncated:
        return {"status": "invalid", "error": f"the result channel held {len(lines)}{'+' if truncated else ''} "
                "records instead of one (a forked copy of the program reached the harness, or the program "
                "wrote to fd 3 itself)"}
    try:
        record = json.loads(lines[0])
    except (ValueError, RecursionError):
        return {"status": "invalid", "error": "the result channel held text that is not a record (the program "
                "wrote to fd 3 itself)"}
    if not isinstance(record, dict) or record.pop("nonce", None) != nonce:
        return {"status": "invalid", "error": "the result record lacks this test's nonce: the program wrote it, "
                "not the harness"}
    # The nonce is no proof: it is in the memory of the program's process (stdio and call tests), so the
    # program can write a record of any shape. Only the harness's shapes pass: an error that is not a
    # string, or a value nested deeper than the harness ever sends, made the reward worker raise (its
    # report parser's recursion limit; `error.startswith`), and the whole group was dropped unjudged.
    forged = {"status": "invalid", "error": "the result record is not one the harness writes (the program wrote it)"}
    if (record.get("status") not in _STATUSES or type(record.get("error", "")) is not str
            or set(record) - {"status", "error", "value"}):
        return forged
    refused = budget.take(record.get("value"), MAX_VALUE_DEPTH)
    if refused == "deep":
        return forged
    if refused == "many":
        return {"status": "invalid", "error": f"the return values of this response's tests hold more than "
                f"{budget.limit} values together (lists, dicts and scalars): each becomes an object in the reward "
                "worker, ~20x its bytes in the report"}
    return record


_STATUSES = ("ok", "exception", "memory")  # what child.py and judge.py write
MAX_VALUE_DEPTH = 256  # child._plain refuses a value nested over 200 deep


# Values (lists, dicts, scalars) of all a response's return values together. The report parses them in the
# reward worker, each an object of ~50-70 bytes: 1 MiB of `[[], [], ...]` per test was 160 MiB there for
# 8 tests and 650 MiB for 64 (measured). 2^20 values bound that at ~70 MB whatever the test count.
MAX_REPORT_VALUES = 1 << 20


class _ValueBudget:
    """What is left of MAX_REPORT_VALUES for the rest of this response's tests."""

    def __init__(self, limit: int = MAX_REPORT_VALUES):
        self.limit = self.left = limit

    def take(self, value, max_depth: int) -> str | None:
        """Charge `value`'s count to the budget in one walk (iterative: the depth is the program's). None:
        charged; "deep": lists/objects nested over `max_depth`; "many": more values than are left (for
        both, nothing is charged)."""
        count, stack = 0, [(value, 0)]
        while stack:
            x, depth = stack.pop()
            count += 1
            if count > self.left:
                return "many"
            if type(x) in (list, dict):
                if depth >= max_depth:
                    return "deep"
                stack.extend((v, depth + 1) for v in (x.values() if type(x) is dict else x))
        self.left -= count
        return None


def _watch(pid: int, deadline: float, mem_limit: int, max_procs: int, judge: int | None, unseen) -> tuple[str, int]:
    """Wait for the test's main process while polling its subtree (every 20 ms, and once after the main
    process ends): memory against the limit and process count against max_procs (the only fork cap
    when the program runs as root, which RLIMIT_NPROC never binds). Memory is the RSS of the
    program's processes (the judge's own is bounded by its RLIMIT_AS) plus `unseen()`: memory no
    process maps (see _unseen_memory). -> ("" | "timeout" | "memory" | "procs", peak bytes)."""
    me, peak = psutil.Process(), 0
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", peak
            ended = bool(select.select([pidfd], [], [], min(remaining, 0.02))[0])
            tree = _tree(me)  # once more after the end: what the program's other processes still hold counts
            if len(tree) > max_procs + (judge is not None) and not ended:
                return "procs", peak
            held = _rss([p for p in tree if p.pid != judge]) + (unseen() if unseen else 0)
            peak = max(peak, held)
            if peak > mem_limit:
                return "memory", peak
            if ended:
                return "", peak
    finally:
        os.close(pidfd)


def _init(job, mods: _Siblings, is_pid1: bool, isolation: list[str], result_fd: int) -> None:
    fs = mods.fs
    # The cgroup's counters are read through a descriptor: the private root has no /sys.
    job["cgroup_fd"] = os.open(job["cgroup"], os.O_RDONLY | os.O_DIRECTORY) if job["cgroup"] else None
    if "mount" in isolation:
        work, cap = fs.private_fs(job)
        isolation = isolation + ["rootfs"]
    else:
        work, cap = fs.layout(job["base"], job["uid"])
        if job["uid"] is not None and not all(fs.reachable_by_others(p) for p in fs.python_paths()):
            # The private uid cannot read the interpreter's stdlib (e.g. under /root) and without a
            # mount namespace we cannot bind it elsewhere. Staying root would void RLIMIT_NPROC (root
            # is exempt) and file permissions, so keep the uid and preload common modules instead.
            fs.preload()
            isolation = isolation + ["preloaded-stdlib"]
    if job["uid"] is not None:
        isolation = isolation + ["uid"]
    if job["cgroup"]:
        isolation = isolation + ["cgroup"]
    if job.get("cpu"):
        isolation = isolation + ["cpu"]
    unseen, isolation = _unseen_memory(job, mods, isolation)
    program = mods.seccomp.filter_program()  # after _unseen_memory's netlink socket: the filter refuses new ones
    if program is not None:  # on ourselves, now that the mounts are done: every later fork inherits it
        try:
            mods.seccomp.install(program)
            isolation = isolation + ["seccomp"]
        except OSError:  # a kernel or container that refuses filters: reported by its absence
            pass
    job["nproc"] = job["max_procs"] + _tasks_counted_with_ours(job, isolation, fs)
    _stdin_files(job["tests"], cap)
    # Work every forked test process would otherwise repeat, done once here: CPython builds its AST
    # types on the first compile() (~1 ms and ~80 copied pages per fork), and the prelude's imports.
    compile("pass", "<warm-up>", "exec")
    kinds = {t["kind"] for t in job["tests"]}
    if kinds - {"stdio"}:
        exec(mods.child.PRELUDE, {})
    if "assert" in kinds:
        import ast  # noqa: F401 - the judge parses the test code
    tests, budget, stopped = [], _ValueBudget(), ""
    # the response's wall clock over all its tests: a program that ends each test just inside timeout_s
    # never counts a timeout, so without it max_timeouts alone would let it hold the worker tests x timeout_s
    ends = math.inf if job["total_s"] is None else time.monotonic() + job["total_s"]
    for i, t in enumerate(job["tests"]):
        job["phase"] = f"test {i}"
        tests.append(_run_test(job, i, t, work, cap, is_pid1, mods, unseen, budget, ends))
        if i + 1 == len(job["tests"]):
            break
        if tests[-1]["timeout"] and sum(r["timeout"] for r in tests) == job["max_timeouts"]:
            stopped = "max_timeouts"            # the runner counts the rest as timed out
            break
        if time.monotonic() >= ends:
            stopped = "total_s"
            break
    _write_report(result_fd, isolation, tests, stopped)


def _tasks_counted_with_ours(job, isolation: list[str], fs) -> int:
    """Tasks that RLIMIT_NPROC already counts beside the sandbox's own, so that max_procs is what the
    program may add. Root's private uid: none (nothing else has it). Without one the program shares the
    user's uid: in a user namespace on 5.14+ the count is the namespace's (init and its threads here,
    plus the launcher outside our pid namespace); otherwise it is every task of the user on the host,
    counted by the runner when our pid namespace hides them, else here."""
    if job["uid"] is not None or os.geteuid() == 0:
        return 0
    if "pid" in isolation and not ("userns" in isolation and fs.NPROC_PER_USERNS):
        return job["user_tasks"] + 2  # the runner counted before the launcher and init existed
    visible = sum(p.info["num_threads"] or 1 for p in psutil.process_iter(["uids", "num_threads"])
                  if p.info["uids"] and p.info["uids"].real == os.getuid())
    return visible + ("userns" in isolation)


def _unseen_memory(job, mods: _Siblings, isolation: list[str]):
    """What the watchdog adds to RSS: bytes parked in unix-socket buffers of our own network namespace
    ("sockmem"), and without a private /dev/shm, the size of what the sandbox's uids own in the host's
    ("shm-files": shm_open and plain files there are memory, and outlive their processes). A cgroup
    counts both anyway; these keep the limit where none can be made. -> (callable or None, isolation)."""
    parts = []
    if "net" in isolation:  # every unix socket of this network namespace is the sandbox's
        try:
            parts.append(mods.sockets.UnixSocketMemory().held)
            isolation = isolation + ["sockmem"]
        except OSError:
            pass
    if "mount" not in isolation and job["uid"] is not None:
        uids = {job["uid"], job["uid"] + (1 << 24)}
        parts.append(lambda: _owned_bytes("/dev/shm", uids))
        isolation = isolation + ["shm-files"]
    return ((lambda: sum(part() for part in parts)) if parts else None), isolation


def _owned_bytes(directory: str, uids: set[int]) -> int:
    """Allocated bytes (not sizes: a sparse file holds nothing) under `directory` owned by `uids`."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if st.st_uid in uids:
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    total += _owned_bytes(entry.path, uids)
        except OSError:
            pass
    return total


def _write_report(fd: int, isolation: list[str], tests: list[dict], stopped: str) -> None:
    """One JSON line (each test's stdout replaced by its length, "stdout_bytes"; "stopped": the limit that
    ended the run before its last test, "max_timeouts" or "total_s", else ""), then the stdouts' raw
    bytes in test order. Not inside the JSON: it escapes what a program prints (a control byte becomes
    six bytes, an invalid UTF-8 byte `\\ufffd`), so a program printing 1 MiB of b"\\x01" per test had the
    reward worker buffer and parse six times the output cap (measured: 1.25 GB of worker RSS for one
    response of 64 tests at the default 1 MiB cap, against 0.29 GB for plain ASCII)."""
    blobs = []
    for test in tests:
        blobs.append(test.pop("stdout"))
        test["stdout_bytes"] = len(blobs[-1])
    _write_all(fd, json.dumps({"isolation": isolation, "tests": tests, "stopped": stopped}).encode() + b"\n")
    for blob in blobs:
        _write_all(fd, blob)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _oom_score_adj(value: int) -> None:
    """-1000: never the OOM killer's pick; 1000: its first. Lowering needs root; without it, skip."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:
            f.write(str(value))
    except OSError:
        pass


def main() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the reward worker died: so do we
    # At the cgroup's limit the kernel OOM-kills inside it: the program, never the launcher or init
    # (forked test processes set their own score back up, see child.confine).
    _oom_score_adj(-1000)
    job = json.loads(sys.stdin.buffer.read())
    for test in job["tests"]:  # assert code: an fd for the judge, never a string in our memory
        path = test.pop("code_path", None)
        if path is not None:
            test["code_fd"] = os.open(path, os.O_RDONLY)
            os.unlink(path)
    # 1, not 0: a limit of 0 still runs a core_pattern pipe helper on the host; 1 is the kernel's "abort
    # the core" (and below any file core's minimum). Inherited by every fork; the filter keeps it there.
    resource.setrlimit(resource.RLIMIT_CORE, (1, 1))
    mods = _Siblings(any(t["kind"] == "assert" for t in job["tests"]))
    isolation = mods.fs.unshare_any(job)
    # Not dumpable from here on (inherited by init; each forked process sets its own): without a private
    # uid the program shares ours, and /proc/<pid>/fd and mem of a dumpable init would hand it the report
    # pipe, the assert tests' code and the capture files. After unshare_any: writing our uid map needs it.
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    job["phase"] = "setup"
    if "pid" in isolation:
        child = os.fork()  # the first child after unshare(CLONE_NEWPID) is pid 1 of the namespace
        if child:
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    result_fd = os.dup(1)
    try:
        _init(job, mods, "pid" in isolation, isolation, result_fd)
    except Exception as e:  # noqa: BLE001 - report, do not traceback into the host's pipe
        _write_all(result_fd, json.dumps({"isolation": isolation, "fatal": f"{type(e).__name__}: {e}",
                                          "phase": job["phase"]}).encode())
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
