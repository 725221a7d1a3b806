"""Namespaces and the private filesystem view, for the sandbox's init (see rewards/sandbox.py).

Loaded by path from _sandbox_init.py (stdlib only). Everything here runs as root before any
untrusted code exists; failures raise, and init reports them instead of running half-isolated.
"""

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 0x4000, 1 << 18
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)


def ok(rc: int) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def mount(src, target, fstype, flags, data=None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    ok(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)))


def unshare_any(job) -> list[str]:
    """Strongest isolation this host grants; the list names what was obtained."""
    if not job["namespaces"]:
        return []
    attempts = [(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC, ["net", "mount", "pid", "ipc"]),
                (CLONE_NEWNET, ["net"])]
    if os.geteuid() != 0:  # unprivileged: a user namespace is what lets us own a network namespace
        attempts = [(CLONE_NEWUSER | CLONE_NEWNET, ["net"])]
    for flags, names in attempts:
        if libc.unshare(flags) == 0:
            return names
    return []


def private_fs(job) -> tuple[str, str]:
    """New mount namespace: nothing propagates to the host; fresh /proc (this pid namespace only);
    private, size-capped tmpfs over every world-writable directory and over the home directories
    (their secrets disappear; only the Python installation is bound back if it lives there).
    Returns (workdir, capture dir)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={job['tmpfs_mb']}m,mode=1777")
    for d in ("/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue"):
        if os.path.isdir(d):
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=1777")
    for home in ("/root", "/home"):
        if os.path.isdir(home):
            _hide_except(home, [p for p in python_paths() if p.startswith(home + "/")])
    return layout("/tmp/sbx", job["uid"])


def python_paths() -> set[str]:
    return {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                          os.path.dirname(os.path.realpath(sys.executable)))}


def _hide_except(directory: str, keep: list[str]) -> None:
    """Mount an empty tmpfs over `directory`, then bind the `keep` subtrees back at their old paths."""
    staged = []
    for i, path in enumerate(sorted(keep)):
        stage = f"/tmp/.keep{i}"
        os.mkdir(stage)
        mount(path, stage, None, MS_BIND | MS_REC)
        staged.append((path, stage))
    mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, stage in staged:
        os.makedirs(path, mode=0o755, exist_ok=True)
        mount(stage, path, None, MS_BIND | MS_REC)
        ok(libc.umount2(stage.encode(), MNT_DETACH))
        os.rmdir(stage)


_PRELOAD = ("abc", "array", "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "enum",
            "fractions", "functools", "heapq", "io", "itertools", "json", "math", "operator", "random", "re",
            "statistics", "string", "sys", "time", "typing", "unicodedata", "encodings.idna", "traceback")


def preload() -> None:
    import importlib

    for name in _PRELOAD:
        importlib.import_module(name)


def reachable_by_others(path: str) -> bool:
    """Could an unprivileged uid traverse to `path` (o+x on every ancestor)?"""
    path = os.path.realpath(path)
    while True:
        if not os.stat(path).st_mode & 0o001:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def layout(base: str, uid) -> tuple[str, str]:
    work, cap = os.path.join(base, "work"), os.path.join(base, "cap")
    os.makedirs(work, mode=0o700, exist_ok=True)
    os.makedirs(cap, mode=0o700, exist_ok=True)   # root-only: the program cannot touch other tests' files
    if uid is not None:
        os.chown(work, uid, uid)
    return work, cap
