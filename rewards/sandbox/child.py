"""The untrusted side of the code sandbox: runs in a process forked by init, one per test.

Order matters: fds first (so nothing of the host's pipes is reachable), then limits, then the
privilege drop (as root: setuid to a throwaway uid; NPROC is counted per uid, and a non-root
uid can neither signal init nor undo the limits; as an ordinary user, in a user namespace: every
capability dropped, see drop_capabilities), then the program. The seccomp filter and the
memory cgroup are already in force: they are init's, inherited at fork (rewards/sandbox/seccomp.py,
rewards/sandbox/cgroup.py).

What this process reports, and why forging it gains nothing:
  * stdio tests: stdout and the exit status (compared by the host); a status record goes to fd 3;
  * call tests: the return value as plain data (exact builtin types, so an object with
    `__eq__ = lambda *a: True` is refused) in the fd-3 record; the expected value never enters the
    sandbox, so a program that writes its own record only chooses its return value;
  * assert tests: nothing. The test code runs in a separate judge process (judge.py) that
    asks this one, over fd 3 (a socketpair), to call the program's functions; the assertions, their
    expected values and the verdict stay in the judge, which the program cannot reach.
The fd-3 record carries a per-test nonce from init, so an early exit after a hand-written record is
told apart from the harness's own. The nonce is in this process's memory, so the program can still
write a record with it: init accepts only the shapes the harness writes (init._read_record), and what
such a record can claim (a value, "ok") is no more than the program could return.
"""

import builtins
import ctypes
import errno
import fcntl
import importlib
import io
import json
import os
import resource
import signal
import struct
import sys
import traceback

PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 38, 4, 24, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PRELUDE = ("import sys, os, math, re, heapq, bisect, itertools, functools, collections, string\n"
           "from typing import *\nfrom collections import *\nfrom functools import *\n")
MAX_REQUEST_BYTES = 1 << 28  # the judge is trusted; this only bounds a garbled frame


def confine(job: dict, fds: list[int], work: str, uid, oom_score: int = 1000, dumpable: bool = True) -> None:
    """Make this freshly forked process safe to run untrusted code in; exits 111 if any step fails.
    The judge passes dumpable=False: its /proc/<pid>/mem and fd entries and ptrace become root-only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        # init is not dumpable (its fds and memory hold what the program must not read, and without a
        # private uid the program shares its uid): we are, until the end, so /proc/self stays ours to write
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        above = max(max(fds), len(fds)) + 1  # copy everything clear of the targets first: a source fd may be one
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds]
        for target, fd in enumerate(moved):
            os.dup2(fd, target)
        os.closerange(len(fds), 1 << 16)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the output cap fails instead
        os.chdir(work)
        try:  # init is exempt (-1000); at the cgroup's limit the program goes first, the judge after it
            with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:
                f.write(str(oom_score))
        except OSError:
            pass
        memory = job["memory_mb"] << 20
        cpu = int(job["timeout_s"]) + 1
        # RLIMIT_CORE is not here: init set it to 1, and the filter forbids changing it (see seccomp.py).
        for res, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                           (resource.RLIMIT_FSIZE, job["max_output_bytes"] + 1),
                           (resource.RLIMIT_NPROC, job["nproc"]), (resource.RLIMIT_NOFILE, 256)):
            resource.setrlimit(res, (value, value))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)   # from root to a non-zero uid: the kernel clears every capability
        else:
            drop_capabilities(libc)       # in a user namespace we hold them all over its namespaces
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if not dumpable:
            libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        os.umask(0o077)
    except BaseException:  # noqa: BLE001 - never run untrusted code half-confined
        os._exit(111)


def drop_capabilities(libc) -> None:
    """Give up every capability for good: the bounding set (so no exec can bring one back), the ambient
    set, then the permitted, effective and inheritable sets (capset). Without root there is no private uid
    to switch to, and the process that made the user namespace holds all of them over its mount, pid
    and network namespaces: kept, they would let the program remount, signal init's helpers or read
    any file the user's uid maps to. Raises OSError if the kernel refuses (confine then exits)."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.EPERM):
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")      # EINVAL: past the last cap; EPERM: none held
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0)   # struct __user_cap_header_struct: this process
    data = bytes(24)                                                 # two __user_cap_data_struct, all zero
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


# Inside the sandbox's CPU quota the program's processes share it with init, whose watchdog enforces the
# per-test timeout: a fork bomb's 32 busy processes left init 1/33 of the quota, and a 4 s test ended after
# 5-18 s on a busy host. At nice 10 they weigh 110 each against init's 1024 (the kernel's table). Only
# under a quota: without one the program would also yield to the host's processes.
PROGRAM_NICE = 10


def run_child(job: dict, test: dict, fds: list[int], work: str, nonce: str, wire) -> None:
    """Never returns: confines this process, runs one test, exits."""
    confine(job, fds, work, job["uid"])
    if job.get("cpu"):
        os.nice(PROGRAM_NICE)
    os._exit(_run(job, test, nonce, wire))


def _run(job: dict, test: dict, nonce: str, wire) -> int:
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8",
                                 errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                  line_buffering=True)
    sys.argv = ["solution.py"]
    kind = test["kind"]
    ns = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": builtins}
    verdict, rc = {"status": "ok"}, 0
    try:
        compiled = compile(job["code"], "<solution>", "exec")
        if kind != "stdio":
            exec(PRELUDE, ns)
        exec(compiled, ns)
        if kind == "call":
            verdict["value"] = _plain(_call(ns, test["fn_name"], test["args"]))
    except SystemExit as e:
        if kind != "stdio":  # leaving early is not passing
            verdict, rc = {"status": "exception", "error": "SystemExit before the test finished"}, 1
        else:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except MemoryError:
        verdict, rc = {"status": "memory", "error": "MemoryError"}, 1
    except BaseException as e:  # noqa: BLE001 - the program's failure is the verdict
        traceback.print_exc()
        verdict, rc = {"status": "exception", "error": f"{type(e).__name__}: {e}"[:500]}, 1
    if kind == "stdio":
        _interpreter_exit()
    _flush()
    if kind == "assert":
        _serve(ns, verdict, wire)
        _flush()
        return 0
    verdict["nonce"] = nonce
    try:
        record = json.dumps(verdict)
    except (TypeError, ValueError) as e:
        record = json.dumps({"status": "exception", "error": f"unserialisable return value: {e}"[:500],
                             "nonce": nonce})
    try:
        os.write(3, (record + "\n").encode())
    except OSError:
        pass
    return rc & 0xFF


def _interpreter_exit() -> None:
    """What `python solution.py` does after the main module ends, before its output is final: wait for
    non-daemon threads (the `threading.Thread(target=main).start()` idiom for a deep recursion stack
    prints from such a thread, after the main thread is done), then run atexit handlers (fast-output
    templates print the buffered answer from one). os._exit below would skip both. Only for stdio
    tests: their output is judged outside, so nothing here can touch a verdict; the wall-clock limit
    bounds a thread that never ends."""
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()
    except BaseException:  # noqa: BLE001 - as the interpreter: a failure here ends the waiting, not the run
        pass
    try:
        import atexit

        atexit._run_exitfuncs()  # prints a handler's exception the way the interpreter does
    except BaseException:  # noqa: BLE001
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - output over the cap (EFBIG): the host sees truncation
            pass


def _serve(ns: dict, verdict: dict, wire) -> None:
    """Answer the judge's requests on fd 3 until it hangs up. First message: the program's own outcome
    (ready, or the exception that ended it). Objects that are not plain data stay here as handles."""
    objects: list = []
    index: dict[int, int] = {}

    def handle(x) -> dict:
        n = index.get(id(x))
        if n is None:
            n = index[id(x)] = len(objects)
            objects.append(x)  # kept alive, so id(x) stays unique
        return {"h": n, "type": type(x).__name__}

    def remote(tag: dict):
        return importlib.import_module(tag["m"]) if "m" in tag else objects[tag["h"]]

    hello = {"ready": True} if verdict["status"] == "ok" else {"exc": _exc_name(verdict), "msg": verdict["error"]}
    try:
        wire.send(3, hello)
        while True:
            request = wire.recv(3, MAX_REQUEST_BYTES)
            try:
                if request[0] == "call":
                    reply = _call_for_judge(request, objects, remote, handle, wire)
                else:
                    reply = {"ok": wire.encode(_answer(request, ns, objects, remote, wire), handle)}
            except BaseException as e:  # noqa: BLE001 - the program's exception is the judge's to see
                reply = {"exc": type(e).__name__, "msg": str(e)[:500]}
            wire.send(3, reply)
    except wire.ChannelClosed:
        return


def _exc_name(verdict: dict) -> str:
    if verdict["status"] == "memory":
        return "MemoryError"
    error = verdict["error"]
    return "SystemExit" if error.startswith("SystemExit") else error.split(":", 1)[0]


def _call_for_judge(request: list, objects: list, remote, handle, wire) -> dict:
    """["call", target, args, kwargs, containers] -> the result, and the listed container arguments
    (positions or keywords) as they are after the call (the judge updates its own copies in place)."""
    _, target, args, kwargs, containers = request
    args, kwargs = wire.decode(args, remote), wire.decode(kwargs, remote)
    result = objects[target](*args, **kwargs)
    after = {key: args[int(key)] if key.isdigit() else kwargs[key] for key in containers}
    return {"ok": wire.encode(result, handle), "after": wire.encode(after, handle)}


def _answer(request: list, ns: dict, objects: list, remote, wire):
    op, args = request[0], request[1:]
    if op == "names":  # the program's top-level objects the test code mentions
        return {name: ns[name] for name in args[0] if name in ns and not name.startswith("__")}
    target = objects[args[0]]
    if op == "getattr":
        return getattr(target, args[1])
    if op == "getitem":
        return target[wire.decode(args[1], remote)]
    if op == "iter":
        return iter(target)
    if op == "next":
        return next(target)
    return {"len": len, "bool": bool, "str": str, "repr": repr}[op](target)


def _call(ns: dict, fn_name: str, args):
    fn = ns.get(fn_name)
    if fn is None and isinstance(ns.get("Solution"), type):  # LeetCode style: class Solution: def f(self, ...)
        fn = getattr(ns["Solution"](), fn_name, None)
    if not callable(fn):
        raise NameError(f"function {fn_name!r} is not defined")
    return fn(*args) if isinstance(args, list) else fn(args)


_SCALARS = (type(None), bool, int, float, str)


def _plain(x, depth: int = 0):
    """JSON-ready copy built only from exact builtin types; anything else is refused (TypeError)."""
    if depth > 200:
        raise ValueError("return value nested too deeply")
    t = type(x)
    if t in _SCALARS:
        return x
    if t in (list, tuple):
        return [_plain(v, depth + 1) for v in x]
    if t in (set, frozenset):
        items = [_plain(v, depth + 1) for v in x]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if t is dict:
        return {str(_plain(k, depth + 1)): _plain(v, depth + 1) for k, v in x.items()}
    raise TypeError(f"return value of type {t.__name__} is not plain data")
