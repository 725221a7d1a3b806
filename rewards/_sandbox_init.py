"""The trusted side of the code sandbox, run as `python -I _sandbox_init.py` (threat model: rewards/sandbox.py).

Reads one JSON job on stdin, writes one JSON report on stdout. Imports only the stdlib and psutil,
nothing from lagrl; its siblings _sandbox_fs.py (namespaces, mounts) and _sandbox_child.py (the
untrusted side) are loaded by path. Shape of the process tree:

    reward worker ── launcher (this file, new session) ── init (pid 1 of a new pid namespace, root,
                                                           unkillable from inside)  ── one forked child
                                                           per test: rlimits, private uid, no privileges,
                                                           runs the untrusted program (rewards/_sandbox_child.py)
Per test, init enforces the wall-clock limit and a psutil memory watchdog over its whole subtree,
then SIGKILLs everything left (kill(-1) as pid 1 of the namespace; psutil + uid sweep without one).
Without namespaces the launcher itself plays init (a child subreaper, so orphans stay countable).
"""

import ctypes
import json
import os
import resource
import secrets
import select
import signal
import sys
import time

import psutil

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
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


def _read_capped(path: str, cap: int, tail: bool = False) -> tuple[str, bool]:
    """At most `cap` bytes (the first ones, or the last ones with `tail`), and whether there was more."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if tail and size > cap:
            f.seek(size - cap)
        data = f.read(cap + 1)
    return data[:cap].decode("utf-8", "replace"), size > cap


def _run_test(job, index: int, test: dict, work: str, cap_dir: str, is_pid1: bool, run_child) -> dict:
    paths = {name: os.path.join(cap_dir, f"{index}.{name}") for name in ("in", "out", "err", "val")}
    with open(paths["in"], "w", encoding="utf-8") as f:
        f.write(test.get("stdin", ""))
    fds = [os.open(paths["in"], os.O_RDONLY)] + [
        os.open(paths[n], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for n in ("out", "err", "val")]
    nonce = secrets.token_hex(16)
    sys.stdout.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # never returns
        run_child(job, test, fds, work, nonce)
    for fd in fds:
        os.close(fd)
    stop, peak = _watch(pid, start + job["timeout_s"], job["memory_mb"] << 20, job["max_procs"])
    duration = time.monotonic() - start
    if stop:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)  # the main process first: its status is the test's
    _kill_everything(is_pid1, job["uid"])
    cap = job["max_output_bytes"]
    stdout, out_trunc = _read_capped(paths["out"], cap)
    stderr, _ = _read_capped(paths["err"], STDERR_TAIL, tail=True)  # diagnostics: the traceback end
    val, _ = _read_capped(paths["val"], cap)
    for p in paths.values():
        os.unlink(p)
    try:
        verdict = json.loads(val) if val else None
    except ValueError:
        verdict = {"status": "invalid", "error": "unreadable result record"}
    if verdict is not None and (not isinstance(verdict, dict) or verdict.pop("nonce", None) != nonce):
        verdict = {"status": "invalid", "error": "forged result record"}
    xcpu = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU
    return {"exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "timeout": stop == "timeout" or xcpu, "procs": stop == "procs",
            "memory": stop == "memory" or (verdict or {}).get("status") == "memory",
            "peak_rss": peak, "duration": duration, "stdout": stdout, "stderr": stderr,
            "truncated": out_trunc, "verdict": verdict}


def _watch(pid: int, deadline: float, mem_limit: int, max_procs: int) -> tuple[str, int]:
    """Wait for the test's main process while polling its subtree (every 20 ms): RSS against the
    memory limit and process count against max_procs (the only fork cap when the program runs as
    root, which RLIMIT_NPROC never binds). -> ("" | "timeout" | "memory" | "procs", peak RSS)."""
    me, peak = psutil.Process(), 0
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", peak
            if select.select([pidfd], [], [], min(remaining, 0.02))[0]:
                return "", peak
            tree = _tree(me)
            if len(tree) > max_procs:
                return "procs", peak
            peak = max(peak, _rss(tree))
            if peak > mem_limit:
                return "memory", peak
    finally:
        os.close(pidfd)


def _init(job, fs, is_pid1: bool, isolation: list[str], result_fd: int, run_child) -> None:
    if "mount" in isolation:
        work, cap = fs.private_fs(job)
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
    job["nproc"] = job["max_procs"]
    if job["uid"] is None and os.geteuid() != 0:  # NPROC counts all of this user's tasks: add ours
        job["nproc"] += sum(p.info["num_threads"] or 1 for p in psutil.process_iter(["uids", "num_threads"])
                            if p.info["uids"] and p.info["uids"].real == os.getuid())
    tests = [_run_test(job, i, t, work, cap, is_pid1, run_child) for i, t in enumerate(job["tests"])]
    _write_all(result_fd, json.dumps({"isolation": isolation, "tests": tests}).encode())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the reward worker died: so do we
    job = json.loads(sys.stdin.buffer.read())
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fs = _load("_sandbox_fs")
    # loaded before the mounts: a checkout under /tmp is hidden by the private /tmp from then on
    run_child = _load("_sandbox_child").run_child
    isolation = fs.unshare_any(job)
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
        _init(job, fs, "pid" in isolation, isolation, result_fd, run_child)
    except Exception as e:  # noqa: BLE001 - report, do not traceback into the host's pipe
        _write_all(result_fd, json.dumps({"isolation": isolation, "fatal": f"{type(e).__name__}: {e}"}).encode())
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
