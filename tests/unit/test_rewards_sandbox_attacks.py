"""Code sandbox vs a hostile policy (issue 19): memory held where RSS does not look, forged assert
verdicts, new namespaces and other kernel surface, and the fidelity of the assert judge that replaced
in-process asserts. Every attack is one parametrized case; after each, nothing of the sandbox may
survive (no process of a sandbox uid, no sandbox cgroup) and the host stays healthy.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from rewards.code_reward import score_code
from rewards.config import RewardConfig
from rewards.sandbox import CodeTest, SandboxLimits, isolation_report, run_code, run_tests
from tests.unit.sandbox_checks import host_stays_healthy  # noqa: F401 - autouse: nothing of a sandbox survives a test

LIMIT_MB = 256
LIMITS = SandboxLimits(timeout_s=3.0, memory_mb=LIMIT_MB, max_output_bytes=4096, max_procs=16)
NO_CGROUP = SandboxLimits(timeout_s=3.0, memory_mb=LIMIT_MB, max_output_bytes=4096, max_procs=16, memory_cgroup=False)
FALLBACK = SandboxLimits(timeout_s=3.0, memory_mb=LIMIT_MB, max_output_bytes=4096, max_procs=16, namespaces=False)
BARE = SandboxLimits(timeout_s=3.0, memory_mb=LIMIT_MB, max_output_bytes=4096, max_procs=16, namespaces=False,
                     memory_cgroup=False)  # what a container without CAP_SYS_ADMIN or a writable cgroup gets
CFG = RewardConfig(code_test_timeout_s=3.0, code_memory_mb=LIMIT_MB)
# What this host grants (root in a VM here: everything; a CI container may lack namespaces or a
# writable cgroup). A case whose defence the host lacks is skipped with the reason, never weakened.
GRANTED = {id(limits): set(isolation_report(limits)) for limits in (LIMITS, NO_CGROUP, FALLBACK, BARE)}


def needs_any(limits: SandboxLimits, *defences: str) -> None:
    if not GRANTED[id(limits)] & set(defences):
        pytest.skip(f"this host grants none of {defences} (got {sorted(GRANTED[id(limits)])})")
SQUARE = json.dumps({"asserts": ["assert f(2) == 4", "assert f(3) == 9", "assert f(4) == 16"]})


def src(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"


def block(code: str) -> str:
    return f"```python\n{src(code)}```\n"


# --- memory that RSS and RLIMIT_AS do not see ---------------------------------------------------------
# Four children each try to hold 100 MiB (400 MiB against a 256 MiB limit) and report what they got.
# Contained means: the sandbox flagged the memory, or the program never held more than the limit.
HOLD = """
import os, time
KEEP = []  # what must stay alive (socket objects close when collected)
def grab(budget_mb):
{body}
readers = []
for k in range(4):
    r, w = os.pipe()
    if os.fork() == 0:
        n = 0
        try:
            n = grab(100)
        except Exception as e:
            print(type(e).__name__, e, file=__import__("sys").stderr)
        os.write(w, str(n).encode().ljust(16))
        time.sleep(2.5)
        os._exit(0)
    os.close(w)
    readers.append(r)
print("held_mb", round(sum(float(os.read(r, 16) or 0) for r in readers)))
"""
# route: the defences of which one suffices (see rewards/sandbox/runner.py). Pipes are capped per user by
# the kernel (pipe-user-pages-soft) and shared anonymous memory is in RSS, so those need nothing.
DEFENCES = {"memfd": ("seccomp", "cgroup"), "sysv-shm": ("seccomp", "cgroup"), "socket-buffers": ("sockmem", "cgroup"),
            "pipe-buffers": (), "dev-shm-files": ("mount", "cgroup", "shm-files"),
            "posix-shared-memory": ("mount", "cgroup", "shm-files"),
            "anon-shared-mmap": ()}
GRABS = {
    "memfd": """
        fds = []
        for i in range(budget_mb):          # the issue's attack: 1 MiB memfd files, never mapped
            fd = os.memfd_create(f"m{i}")
            os.write(fd, b"x" * (1 << 20))
            fds.append(fd)
        return len(fds)""",
    "sysv-shm": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        held = 0
        for i in range(budget_mb // 16):    # attach, fill, detach: the segment outlives every mapping
            sid = libc.shmget(0, 16 << 20, 0o1600)
            if sid < 0:
                raise OSError(ctypes.get_errno(), "shmget")
            addr = libc.shmat(sid, None, 0)
            ctypes.memset(addr, 1, 16 << 20)
            libc.shmdt(ctypes.c_void_p(addr))
            held += 16
        return held""",
    "socket-buffers": """
        import socket
        sent = 0
        for i in range(120):                # fill socketpairs nobody reads
            a, b = socket.socketpair()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            a.setblocking(False)
            try:
                while sent < budget_mb << 20:
                    sent += a.send(b"x" * 65536)
            except BlockingIOError:
                pass
            KEEP.extend([a, b])
        return sent / 2 ** 20""",
    "pipe-buffers": """
        import fcntl
        sent = 0
        for i in range(120):
            r, w = os.pipe()
            try:
                fcntl.fcntl(w, 1031, 1 << 20)   # F_SETPIPE_SZ
            except OSError:
                pass
            os.set_blocking(w, False)
            try:
                while True:
                    sent += os.write(w, b"x" * 65536)
            except BlockingIOError:
                pass
            KEEP.extend([r, w])
        return sent / 2 ** 20""",
    "dev-shm-files": """
        held = 0
        for i in range(budget_mb * 256):     # 4 KiB files (under RLIMIT_FSIZE) in shm_open's directory
            with open(f"/dev/shm/f{os.getpid()}-{i}", "wb") as f:
                f.write(b"x" * 4096)
            held += 4096
        return held / 2 ** 20""",
    "posix-shared-memory": """
        from multiprocessing import shared_memory
        shm = shared_memory.SharedMemory(create=True, size=budget_mb << 20)
        shm.buf[:] = b"x" * (budget_mb << 20)  # tmpfs-backed; mapped, so RSS sees it too
        shm.close()                          # unmapped, the file keeps the pages
        return budget_mb""",
    "anon-shared-mmap": """
        import mmap
        m = mmap.mmap(-1, budget_mb << 20, flags=mmap.MAP_SHARED)
        m.write(b"x" * (budget_mb << 20))
        KEEP.append(m)
        return budget_mb""",
}


@pytest.mark.parametrize("limits", [LIMITS, NO_CGROUP, BARE], ids=["cgroup", "no-cgroup", "bare"])
@pytest.mark.parametrize("route", list(GRABS))
def test_memory_outside_rss_is_bounded(route, limits):
    if DEFENCES[route]:
        needs_any(limits, *DEFENCES[route])
    body = textwrap.indent(textwrap.dedent(GRABS[route]).strip("\n"), "    ")
    r = run_code(HOLD.format(body=body), limits=limits)
    if "ModuleNotFoundError" in r.stderr:  # "preloaded-stdlib": the interpreter is unreadable to the uid
        pytest.skip(f"the program cannot import what it needs here ({r.stderr.splitlines()[-1]})")
    held = int(r.stdout.split()[-1]) if r.stdout.startswith("held_mb") else 0
    assert r.memory_exceeded or held <= LIMIT_MB, (held, r)
    assert not r.error.startswith("sandbox"), r  # the kernel's OOM kill took the program, not the sandbox


# --- forged verdicts for assert tests -----------------------------------------------------------------
# Each program's f is wrong (returns 0); each tries to make "f(2) == 4; f(3) == 9; f(4) == 16" pass anyway.
FORGERIES = {
    "frame-walk-nonce": """
        import json, os, sys
        frame = sys._getframe()
        while frame is not None and "nonce" not in frame.f_locals:
            frame = frame.f_back
        if frame is not None:
            os.write(3, json.dumps({"status": "ok", "nonce": frame.f_locals["nonce"]}).encode() + b"\\n")
            os._exit(0)
        def f(x): return 0""",
    "patch-builtins-exec": """
        import builtins
        builtins.exec = lambda *a, **k: None   # the harness execs the asserts with this
        def f(x): return 0""",
    "patch-json-dumps": """
        import json
        _dumps = json.dumps
        json.dumps = lambda v, *a, **k: _dumps(dict(v, status="ok", error="") if isinstance(v, dict) else v)
        def f(x): return 0""",
    "patch-harness-globals": """
        import sys
        frame = sys._getframe()
        while frame is not None:
            for name in ("_asserts", "_judge"):
                if name in frame.f_globals:
                    frame.f_globals[name] = lambda *a, **k: None
            frame = frame.f_back
        def f(x): return 0""",
    "settrace-rewrites-comparisons": """
        import sys
        def tracer(frame, event, arg):
            if frame.f_code.co_filename == "<tests>":
                frame.f_globals["__lagrl_eq__"] = lambda a, b: True
            return tracer
        sys.settrace(tracer)
        def f(x): return 0""",
    "gc-reads-expected-values": """
        import gc, re
        table = {}
        for obj in gc.get_objects():
            if isinstance(obj, dict) and obj.get("kind") == "assert" and isinstance(obj.get("code"), str):
                for arg, want in re.findall(r"f\\((\\d+)\\) == (\\d+)", obj["code"]):
                    table[int(arg)] = int(want)
        def f(x): return table.get(x, 0)""",
    "monkeypatch-assertion-error": """
        import builtins
        class Quiet(Exception):
            pass
        builtins.AssertionError = Quiet
        def f(x): return 0""",
    "record-then-exit": """
        import os
        os.write(3, b'{"status": "ok"}\\n')
        os._exit(0)
        def f(x): return 0""",
    "spam-fd3-from-thread": """
        import os, threading, time
        def spam():
            for _ in range(200):
                try:
                    os.write(3, b'{"status": "ok"}\\n')
                except OSError:
                    pass
                time.sleep(0.001)
        threading.Thread(target=spam, daemon=True).start()
        def f(x):
            time.sleep(0.05)
            return 0""",
    "answer-the-judge-itself": """
        import json, os, struct
        def send(msg):
            data = json.dumps(msg).encode()
            os.write(3, struct.pack("!I", len(data)) + data)
        send({"ready": True})
        try:
            while True:                       # every request: "it is object 0", which must equal anything
                size = struct.unpack("!I", os.read(3, 4))[0]
                os.read(3, size)
                send({"ok": {"h": 0, "type": "Anything"}})
        except Exception:
            os._exit(0)
        def f(x): return 0""",
    "kill-everything-else": """
        import os, signal
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        def f(x): return 0""",
    "ptrace-and-proc-mem": """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
            libc.ptrace(16, pid, 0, 0)                       # PTRACE_ATTACH
            for path in (f"/proc/{pid}/mem", f"/proc/{pid}/fd/3"):
                try:
                    with open(path, "r+b") as handle:
                        handle.write(b"x")
                except OSError:
                    pass
        def f(x): return 0""",
    "read-the-judges-files": """
        import glob, re
        table = {}
        for path in glob.glob("/proc/[0-9]*/fd/*") + glob.glob("/proc/[0-9]*/mem") + glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(path, "rb") as handle:
                    text = handle.read(1 << 16).decode("latin-1")
            except (OSError, ValueError):
                continue
            for arg, want in re.findall(r"f\((\d+)\) == (\d+)", text):
                table[int(arg)] = int(want)
        def f(x): return table.get(x, 0)""",
    "shadow-builtins-and-prelude": """
        import math as _m
        class math:                       # the test's math.isclose, abs and max would be ours
            isclose = staticmethod(lambda *a, **k: True)
        abs = max = lambda *a, **k: 0
        def f(x): return 0""",
    "eq-object": """
        class Anything:
            def __eq__(self, other): return True
            def __bool__(self): return True
        def f(x): return Anything()""",
}
SHADOWED = json.dumps({"asserts": ["assert f(2) == abs(-4)", "assert f(3) == max(9, 0)",
                                   "assert math.isclose(f(4), 16.0)"]})


@pytest.mark.parametrize("spec", [SQUARE, SHADOWED], ids=["plain-asserts", "asserts-using-builtins"])
@pytest.mark.parametrize("attack", list(FORGERIES))
def test_assert_verdicts_cannot_be_forged(attack, spec):
    r = score_code(block(FORGERIES[attack]), spec, CFG)
    assert r.reward == 0.0 and r.reason != "correct", r


# The iterator protocol across the channel: a StopIteration (or StopAsyncIteration) the program raises
# must not end the *test's* loop, as it would inside map()/all() or an `async for` (PEP 479's rule: it
# becomes a RuntimeError), and an object of the program with lying dunders is asked nothing it could
# lie about (it equals only itself, hashes by identity, has no ordering or number conversions).
ASYNC_SQUARES = """
import asyncio
class Squares:
    def __init__(self):
        self.xs = [2, 3, 4]
    def __aiter__(self):
        return self
    async def __anext__(self):
        if not self.xs:
            raise StopAsyncIteration
        x = self.xs.pop()
        return f(x) == x * x
async def main():
    return [ok async for ok in Squares()]
assert all(asyncio.run(main()))
"""
BOX = "class Box:\n    {}\ndef f(x):\n    return Box()"
LIAR = """
class Four:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return hash(4)
    def __lt__(self, other): return False
    __gt__ = __le__ = __ge__ = lambda self, other: True
    def __index__(self): return 4
    __int__ = __index__
    def __float__(self): return 4.0
def f(x):
    return Four()"""
PROTOCOL_FORGERIES = {  # name: (program, asserts), every program wrong
    "stopiteration-ends-map": ("def f(x):\n    raise StopIteration",
                               ["assert all(map(lambda x: f(x) == x * x, [2, 3, 4]))"]),
    "stopiteration-empties-list": ("def f(x):\n    raise StopIteration", ["assert list(map(f, [2, 3])) == []"]),
    "stopasynciteration-ends-async-for": ("def f(x):\n    raise StopAsyncIteration", [ASYNC_SQUARES]),
    "iter-raises-stopiteration": (BOX.format("def __iter__(self):\n        raise StopIteration"),
                                  ["assert all(map(lambda x: list(f(x)) == [x * x], [2, 3]))"]),
    "len-raises-stopiteration": (BOX.format("def __len__(self):\n        raise StopIteration"),
                                 ["assert all(map(lambda x: len(f(x)) == x, [2, 3]))"]),
    "bool-raises-stopiteration": (BOX.format("def __bool__(self):\n        raise StopIteration"),
                                  ["assert all(map(lambda x: not f(x), [2, 3]))"]),
    "str-raises-stopiteration": (BOX.format("def __str__(self):\n        raise StopIteration"),
                                 ["assert all(map(lambda x: str(f(x)) == str(x * x), [2, 3]))"]),
    "attribute-raises-stopiteration": (BOX.format("@property\n    def val(self):\n        raise StopIteration"),
                                       ["assert all(map(lambda x: f(x).val == x * x, [2, 3]))"]),
    "getitem-raises-stopiteration": (BOX.format("def __getitem__(self, i):\n        raise StopIteration"),
                                     ["assert all(map(lambda x: f(x)[0] == x * x, [2, 3]))"]),
    "next-raises-stopasynciteration": (BOX.format("def __iter__(self):\n        return self\n"
                                                  "    def __next__(self):\n        raise StopAsyncIteration"),
                                       ["assert all(map(lambda x: list(f(x)) == [x * x], [2, 3]))"]),
    "lying-dunders": (LIAR, ["assert f(2) in {4}", "assert {f(2): 'ok'}.get(4) == 'ok'", "assert 4 in [f(2)]",
                             "assert [f(2)].count(4) == 1", "assert not (f(2) != 4)", "assert 4 <= f(2) <= 4",
                             "assert int(f(2)) == 4", "assert float(f(2)) == 4.0", "assert [0, 1, 2, 3, 4][f(2)] == 4",
                             "assert sorted([f(2), 1])[1] == 4"]),
}


@pytest.mark.parametrize("attack", list(PROTOCOL_FORGERIES))
def test_iterator_protocol_cannot_forge_a_pass(attack):
    program, asserts = PROTOCOL_FORGERIES[attack]
    r = score_code(block(program), json.dumps({"asserts": asserts}), CFG)
    assert r.reward == 0.0 and r.reason != "correct", r


def test_judge_imports_no_module_the_program_names():
    """A module crosses the channel by name and the judge uses its own copy. The program chooses the
    name (a ModuleType it made itself), so the judge must not import it: imported code would run as the
    judge, beside the verdict channel. `this` shows whether it did: importing it prints the Zen of Python
    to the judge's stdout, which is the test's stderr (flushed by the test code: names are resolved first)."""
    r = run_tests(src("""
        import types
        this = types.ModuleType("this")
        def f(x):
            return x * x
    """), [CodeTest("assert", code="import sys\nsys.stdout.flush()\nassert f(2) == 4 and this is not None")], LIMITS)[0]
    assert "Beautiful is better than ugly" not in r.stderr, r
    assert not r.success and "this" in r.error, r


def test_a_programs_own_iterators_still_end_normally():
    """The protocol's own end of iteration (a program iterator that is exhausted) still ends the test's loop."""
    program = "def f(n):\n    yield from range(n)\nclass Count:\n    def __iter__(self):\n        return iter([1, 2])"
    asserts = ["assert list(f(3)) == [0, 1, 2] and [x for x in Count()] == [1, 2] and next(f(0), 'end') == 'end'",
               "it = f(1)\nassert next(it) == 0\ntry:\n    next(it)\n    assert False\nexcept StopIteration:\n    pass"]
    assert score_code(block(program), json.dumps({"asserts": asserts}), CFG).reason == "correct"


# --- namespaces and other kernel surface ---------------------------------------------------------------
PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    ctypes.set_errno(0)
    rc = libc.syscall(*[ctypes.c_long(a) for a in args])
    if rc == 0 and args[0] in (56, 220):     # a raw clone that worked: the copy leaves at once
        os._exit(0)
    return rc, ctypes.get_errno()
"""
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
X86 = os.uname().machine == "x86_64"
KERNEL_SURFACE = {  # name: (x86-64 number, arm64 number, arguments, errno expected)
    "unshare-newuser": (272, 97, [CLONE_NEWUSER], 1),
    "unshare-newns": (272, 97, [0x00020000], 1),
    "clone-newuser": (56, 220, [CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0], 1),
    "clone3": (435, 435, [0, 0], 38),
    "setns": (308, 268, [0, 0], 1),
    "memfd_create": (319, 279, [0, 0], 1),
    "shmget": (29, 194, [0, 4096, 0o1600], 1),
    "ptrace-traceme": (101, 117, [0, 0, 0, 0], 1),
    "bpf": (321, 280, [0, 0, 0], 1),
    "userfaultfd": (323, 282, [0], 1),
    "io_uring_setup": (425, 425, [1, 0], 1),
    "perf_event_open": (298, 241, [0, 0, -1, -1, 0], 1),
    "keyctl": (250, 219, [0, 0], 1),
    "process_vm_readv": (310, 270, [1, 0, 0, 0, 0, 0], 1),
}


@pytest.mark.parametrize("limits", [LIMITS, FALLBACK], ids=["ns", "fallback"])
@pytest.mark.parametrize("name", list(KERNEL_SURFACE))
def test_kernel_surface_is_refused(name, limits):
    needs_any(limits, "seccomp")
    x86, arm, args, expected = KERNEL_SURFACE[name]
    r = run_code(PROBE + f"print(*call({x86 if X86 else arm}, {', '.join(map(str, args))}))\n", limits=limits)
    assert r.success, r
    assert r.stdout.split() == ["-1", str(expected)], r


@pytest.mark.parametrize("limits", [LIMITS, FALLBACK], ids=["ns", "fallback"])
def test_only_unix_and_ip_sockets(limits):
    """AF_VSOCK reaches the VM's host whatever the network namespace; netlink, packet and AF_ALG are
    kernel surface. Only creation is tried: nothing here ever connects anywhere."""
    needs_any(limits, "seccomp")
    r = run_code(src("""
        import socket
        for family, kind in ((40, 1), (16, 2), (17, 3), (38, 5), (1, 1), (2, 1), (10, 2)):
            try:
                socket.socket(family, kind).close()
                print(family, "created")
            except OSError as e:
                print(family, "refused" if e.errno in (1, 13, 97) else e.errno)
        socket.socketpair()[0].close()
        print("socketpair created")
    """), limits=limits)
    assert r.success, r
    assert r.stdout.split("\n")[:8] == ["40 refused", "16 refused", "17 refused", "38 refused", "1 created",
                                         "2 created", "10 created", "socketpair created"], r


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) here")
def test_unshare_command_is_refused():
    needs_any(LIMITS, "seccomp")
    r = run_code(src("""
        import subprocess
        p = subprocess.run(["unshare", "--user", "--map-root-user", "id", "-u"], capture_output=True, text=True)
        print(p.returncode, p.stdout.strip() or "-")
    """), limits=LIMITS)
    assert r.success and r.stdout.split()[0] != "0", r


def test_ordinary_programs_still_run_under_the_filter():
    r = run_code(src("""
        import asyncio, os, subprocess, threading
        from concurrent.futures import ThreadPoolExecutor
        from multiprocessing import Pool
        out = []
        t = threading.Thread(target=lambda: out.append("thread")); t.start(); t.join()
        with ThreadPoolExecutor(2) as ex:
            out.append(sum(ex.map(abs, [-1, -2])))
        with Pool(2) as pool:
            out.append(sum(pool.map(abs, [-3, -4])))
        out.append(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())
        out.append(asyncio.run(asyncio.sleep(0, "async")))
        pid = os.fork()
        if pid == 0:
            os._exit(3)
        out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        print(out)
    """), limits=LIMITS)
    assert r.success, r
    assert r.stdout.strip() == "['thread', 3, 7, 'child', 'async', 3]"


# --- the assert judge keeps ordinary assert tests working ------------------------------------------------
@pytest.mark.parametrize("program,asserts,reason", [
    ("def f(x): return x * x", ["assert f(2) == 4", "assert [f(i) for i in range(3)] == [0, 1, 4]"], "correct"),
    ("def f(x): return x * x", ["def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(0) == 0\n"
                                "check(f)"], "correct"),                            # HumanEval's shape
    ("class Solution:\n    def twoSum(self, a, t):\n        return [0, 1]",
     ["assert Solution().twoSum([2, 7], 9) == [0, 1]"], "correct"),                 # LeetCode's shape
    ("def f():\n    return (1, 2), {3}, {'a': [None, 2.5]}, 10 ** 40, b'x', frozenset({1})",
     ["assert f() == ((1, 2), {3}, {'a': [None, 2.5]}, 10 ** 40, b'x', frozenset({1}))"], "correct"),
    ("def f():\n    return [1, 2]", ["assert f() == (1, 2)"], "wrong"),                 # a list is not a tuple
    ("def f(n):\n    yield from range(n)", ["assert list(f(3)) == [0, 1, 2]", "assert sum(f(4)) == 6"], "correct"),
    ("class Node:\n    def __init__(self, v):\n        self.val, self.next = v, None\n"
     "def make(v):\n    return Node(v)", ["n = make(3)\nassert n.val == 3 and n.next is None"], "correct"),
    ("def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x",
     ["try:\n    f(-1)\n    assert False\nexcept ValueError:\n    pass"], "correct"),   # expected exceptions
    ("def f(x):\n    return 1 / x", ["assert f(0) == 1"], "runtime_error"),
    ("def f(x):\n    assert x > 0\n    return x", ["assert f(0) == 0"], "wrong"),     # the program's own assert
    ("def helper(x):\n    return x + 1\ndef f(x):\n    return helper(x) * 2",
     ["assert helper(1) == 2 and f(1) == 4"], "correct"),                           # program helpers are visible
    ("import fractions as fr\ndef f():\n    return 0.5", ["assert fr.Fraction(f()) == fr.Fraction(1, 2)"], "correct"),
    ("def sort_in_place(a):\n    a.sort()", ["a = [3, 1, 2]\nsort_in_place(a)\nassert a == [1, 2, 3]"], "correct"),
    ("def f(x):\n    return x", ["assert f(lambda: 1)() == 1"], "runtime_error"),     # a test callable cannot cross
    ("import sys\nsys.exit(0)\ndef f(x): return x", ["assert f(1) == 1"], "runtime_error"),
    ("def f(x):\n    return float('nan')", ["import math\nassert math.isnan(f(1))"], "correct"),
], ids=["plain", "check-candidate", "solution-class", "exact-types", "list-vs-tuple", "generator", "object-attrs",
        "expected-exception", "runtime-error", "program-assert", "helpers", "module-alias", "in-place-mutation",
        "callable-argument", "exit-before-tests", "nan"])
def test_judge_keeps_assert_semantics(program, asserts, reason):
    r = score_code(block(program), json.dumps({"asserts": asserts}), CFG)
    assert r.reason == reason, r


def test_judge_calls_run_in_order_in_one_program_process():
    # Program state is seen through calls; a plain-data global is read once, when the test starts.
    program = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\ndef seen():\n    return calls"
    asserts = ["assert calls == []\nassert f(5) == 1\nassert f(6) == 2\nassert seen() == [5, 6]"]
    assert score_code(block(program), json.dumps({"asserts": asserts}), CFG).reason == "correct"


# --- errors that say what happened ------------------------------------------------------------------------
def test_several_records_on_the_result_channel_are_named_as_such():
    r = run_tests(src("""
        import os, time
        if os.fork():                 # both copies run on into the harness and each writes a record,
            time.sleep(0.3)           # the forked copy first
        def f(x):
            return x
    """), [CodeTest("call", fn_name="f", args=[1])], LIMITS)[0]
    assert not r.success and "records" in r.error and "forged" not in r.error, r


@pytest.mark.parametrize("content,message", [
    ("", None),
    ('{"status": "ok", "nonce": "N"}\n', "ok"),
    ('{"status": "ok", "nonce": "N"}\n{"status": "ok", "nonce": "N"}\n', "2 records"),
    ('junk{"status": "ok", "nonce": "N"}\n', "not a record"),
    ('{"status": "ok", "nonce": "other"}\n', "nonce"),
    ('{"status": "exception", "error": [1], "nonce": "N"}\n', "not one the harness writes"),
    ('{"status": "passed", "nonce": "N"}\n', "not one the harness writes"),
    ('{"status": "ok", "value": ' + "[" * 300 + "]" * 300 + ', "nonce": "N"}\n', "not one the harness writes"),
    ('{"status": "ok", "value": ' + "[" * 1500 + "]" * 1500 + ', "nonce": "N"}\n', "not a record"),
    (None, "could not be read"),
])
def test_result_record_errors(tmp_path, content, message):
    init = _load_init()
    path = tmp_path / "val"
    if content is None:
        path.mkdir()                  # reading a directory fails
    else:
        path.write_text(content)
    fd = os.open(path, os.O_RDONLY)  # init reads the capture file through its descriptor
    try:
        record = init._read_record(fd, 4096, "N", init._ValueBudget())
    finally:
        os.close(fd)
    if message is None:
        assert record is None
    elif message == "ok":
        assert record == {"status": "ok"}
    else:
        assert record["status"] == "invalid" and message in record["error"], record


def test_value_budget_counts_and_bounds_depth_in_one_walk():
    init = _load_init()
    budget = init._ValueBudget(limit=10)
    assert budget.take({"a": [1, 2], "b": 3}, 4) is None and budget.left == 10 - 5     # dict, list, 1, 2, 3
    assert budget.take([[[1]]], 2) == "deep" and budget.left == 5                      # nothing charged
    assert budget.take(list(range(5)), 4) == "many" and budget.left == 5               # 6 values > 5 left
    assert budget.take([[1]], 2) is None and budget.left == 2                          # depth 2 is allowed


def _load_init():
    import importlib.util

    from rewards import sandbox

    spec = importlib.util.spec_from_file_location("_sandbox_init_under_test", sandbox.INIT_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fallback_removes_what_the_program_left_in_world_writable_dirs():
    """Without a mount namespace /dev/shm and /tmp are the host's: shm_open-style files would outlive
    the sandbox and count against no limit. They are owned by the sandbox's private uid and removed."""
    if os.geteuid() != 0:
        pytest.skip("needs the private uid (root)")
    r = run_code(src("""
        import os
        for d in ("/dev/shm", "/tmp"):
            with open(os.path.join(d, f"lagrl-left-{os.getpid()}"), "wb") as f:
                f.write(b"x" * 1024)
            os.makedirs(os.path.join(d, f"lagrl-dir-{os.getpid()}", "sub"))
        print(os.getpid())
    """), limits=FALLBACK)
    assert r.success, r
    pid = r.stdout.strip()
    for d in ("/dev/shm", "/tmp"):
        assert not os.path.exists(os.path.join(d, f"lagrl-left-{pid}"))
        assert not os.path.exists(os.path.join(d, f"lagrl-dir-{pid}"))
