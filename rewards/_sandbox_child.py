"""The untrusted side of the code sandbox: runs in a process forked by _sandbox_init, one per test.

Order matters: fds first (so nothing of the host's pipes is reachable), then limits, then the
privilege drop (setuid to a throwaway uid; NPROC is counted per uid, and a non-root uid can neither
signal init nor undo the limits), then the program. The verdict goes to fd 3 as one JSON record
carrying a per-test nonce from init, so a program that just writes `{"status": "ok"}` to fd 3 and
exits is caught (finding the nonce takes deliberate introspection of this harness).

Judging stays outside this process where it can: stdio output and call-test return values are
compared by the host, and return values must be plain data (exact builtin types), so a returned
object with `__eq__ = lambda *a: True` or a premature `sys.exit(0)` does not pass. Assert tests
must run here; `==` inside them is rewritten to a strict comparison for the same reason.
"""

import ast
import builtins
import io
import json
import os
import resource
import signal
import sys
import traceback

PR_SET_NO_NEW_PRIVS = 38
_PRELUDE = ("import sys, os, math, re, heapq, bisect, itertools, functools, collections, string\n"
            "from typing import *\nfrom collections import *\nfrom functools import *\n")


def run_child(job: dict, test: dict, fds: list[int], work: str, nonce: str) -> None:
    """Never returns: confines this process, runs one test, exits."""
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), 1 << 16)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the output cap fails instead
        os.chdir(work)
        memory = job["memory_mb"] << 20
        cpu = int(job["timeout_s"]) + 1
        for res, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                           (resource.RLIMIT_FSIZE, job["max_output_bytes"] + 1),
                           (resource.RLIMIT_NPROC, job["nproc"]), (resource.RLIMIT_NOFILE, 256),
                           (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (value, value))
        uid = job["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os.umask(0o077)
    except BaseException:  # noqa: BLE001 - never run untrusted code half-confined
        os._exit(111)
    os._exit(_run(job["code"], test, nonce))


def _run(code: str, test: dict, nonce: str) -> int:
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
        compiled = compile(code, "<solution>", "exec")
        if kind != "stdio":
            exec(_PRELUDE, ns)
        exec(compiled, ns)
        if kind == "call":
            verdict["value"] = _plain(_call(ns, test["fn_name"], test["args"]))
        elif kind == "assert":
            _asserts(ns, test["code"])
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
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - output over the cap (EFBIG): the host sees truncation
            pass
    verdict["nonce"] = nonce
    try:
        record = json.dumps(verdict)
    except (TypeError, ValueError) as e:
        record = json.dumps({"status": "exception", "error": f"unserialisable return value: {e}"[:500],
                             "nonce": nonce})
    try:
        os.write(3, record.encode())
    except OSError:
        pass
    return rc & 0xFF


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


def _strict_eq(a, b) -> bool:
    try:
        return _plain(a) == _plain(b)
    except (TypeError, ValueError):  # non-plain values: only the same type, compared by the test's side
        return type(a) is type(b) and bool(b == a)


class _EqToStrict(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            node.test = ast.Call(ast.Name("__lagrl_eq__", ast.Load()), [t.left, t.comparators[0]], [])
        return node


def _asserts(ns: dict, code: str) -> None:
    tree = ast.fix_missing_locations(_EqToStrict().visit(ast.parse(code)))
    scope = dict(ns)
    scope["__lagrl_eq__"] = _strict_eq
    exec(compile(tree, "<tests>", "exec"), scope)
