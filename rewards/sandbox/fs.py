"""Namespaces and the private filesystem view, for the sandbox's init (see rewards/sandbox/runner.py).

Loaded by path from init.py (stdlib only). Everything here runs as root before any
untrusted code exists; failures raise, and init reports them instead of running half-isolated.
"""

import ctypes
import os
import re
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 0x4000, 1 << 18
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)


def ok(rc: int) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def mount(src, target, fstype, flags, data=None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    ok(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)))


def _kernel_at_least(version: tuple[int, int]) -> bool:
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return match is not None and (int(match[1]), int(match[2])) >= version


# RLIMIT_NPROC counts per user namespace and uid since Linux 5.14 ("ucounts"); before, every task of the uid
# on the host, which a process inside a new pid namespace cannot see
NPROC_PER_USERNS = _kernel_at_least((5, 14))


def unshare_any(job) -> list[str]:
    """Strongest isolation this host grants; the list names what was obtained.

    As root: new mount, network, pid and ipc namespaces. As an ordinary user (a cluster account, a pod
    without CAP_SYS_ADMIN) the same four inside a new user namespace ("userns"), where this process
    holds every capability over them: the program gets the same walls as under root, but keeps the
    user's identity (only one uid can be mapped without a setuid helper), so the parts that relied on a
    throwaway uid are done otherwise (child.drop_capabilities, init's non-dumpable state, unlinked
    capture files). A host without unprivileged user namespaces gives nothing: the caller reports it."""
    if not job["namespaces"]:
        return []
    full = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
    if os.geteuid() == 0:
        attempts = [(full, ["net", "mount", "pid", "ipc"]), (CLONE_NEWNET, ["net"])]
    else:
        attempts = [(CLONE_NEWUSER | full, ["userns", "net", "mount", "pid", "ipc"]),
                    (CLONE_NEWUSER | CLONE_NEWNET, ["userns", "net"])]
    uid, gid = os.getuid(), os.getgid()  # after the unshare they read as the overflow ids until mapped
    for flags, names in attempts:
        if libc.unshare(flags) == 0:
            if flags & CLONE_NEWUSER:
                map_own_ids(uid, gid)
            return names
    return []


def map_own_ids(uid: int, gid: int) -> None:
    """In a fresh user namespace: map our uid and gid to themselves (the one mapping an unprivileged
    process may write), so files keep their owner and the program reads what the user may read.
    setgroups must be denied first: otherwise a gid map would let us drop supplementary groups that
    some files deny access to."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as f:
            f.write(text)


# What the program's root holds besides the Python installation: the system trees (bound read-only, or
# the merged-/usr symlinks copied), the harmless device nodes, a fresh /proc and private tmpfs.
_SYSTEM = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_DEVICE_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                 ("stderr", "/proc/self/fd/2"))


def private_fs(job) -> tuple[str, str]:
    """New mount namespace, then a minimal read-only root: /usr, /etc and the merged-/usr links, the
    Python installation at its own path, /dev/{null,zero,full,random,urandom}, a fresh /proc (this pid
    namespace only) and private, size-capped tmpfs at /tmp, /var/tmp and /dev/shm. Nothing else of the
    host is reachable: not the checkout, run directories, caches or datasets (their answers), not the
    home directories. `job["hidden"]` paths that lie inside what is shown (data under the Python
    installation, say) are covered by empty read-only mounts; the Python installation itself stays.
    Built on a tmpfs over the run's host directory, entered with pivot_root and the old root detached.
    Returns (workdir, capture dir)."""
    os.umask(0o022)  # the skeleton's directories must be traversable by the private uid
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = job["base"]  # the host's directory for this run: ours alone, and hidden from the host's view
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    shown = []
    for name in _SYSTEM:
        path = "/" + name
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            _bind_read_only(path, root + path)
            shown.append(path)
    os.mkdir(root + "/dev")
    for name in _DEVICES:
        if os.path.exists("/dev/" + name):
            open(root + "/dev/" + name, "wb").close()
            mount("/dev/" + name, root + "/dev/" + name, None, MS_BIND)
    for name, target in _DEVICE_LINKS:
        os.symlink(target, f"{root}/dev/{name}")
    _tmpfs(root + "/dev/shm", "size=8m,mode=1777")
    os.mkdir(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _tmpfs(root + "/tmp", f"size={job['tmpfs_mb']}m,mode=1777")
    _tmpfs(root + "/var/tmp", "size=8m,mode=1777")
    python = _outermost(p for p in python_paths() if p != "/" and not _inside(p, shown))
    for path in python:  # after /tmp: a checkout (and its venv) may live there
        _bind_read_only(path, root + path)
    shown += python
    for path in job.get("hidden", ()):
        if _inside(path, shown) and path not in shown and not any(_inside(p, [path]) for p in python):
            _cover(root + path)
    os.chdir(root)
    _pivot_root()
    ok(libc.umount2(b".", MNT_DETACH))  # the host's root, stacked under ours by pivot_root(".", ".")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)  # the skeleton
    return layout("/tmp/sbx", job["uid"])


def python_paths() -> set[str]:
    return {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                          os.path.dirname(os.path.realpath(sys.executable)))}


def _inside(path: str, trees) -> bool:
    """Is `path` one of `trees` or below one?"""
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in trees)


def _outermost(paths) -> list[str]:
    out: list[str] = []
    for path in sorted(set(paths)):  # a parent sorts before its children
        if not _inside(path, out):
            out.append(path)
    return out


def _bind_read_only(source: str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _tmpfs(target: str, options: str, flags: int = 0) -> None:
    os.makedirs(target, exist_ok=True)
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | flags, options)


def _cover(target: str) -> None:
    """An empty read-only directory over a directory, /dev/null over anything else."""
    if os.path.isdir(target) and not os.path.islink(target):
        _tmpfs(target, "size=4k,mode=0755", MS_NOEXEC | MS_RDONLY)
    elif os.path.lexists(target):
        mount("/dev/null", target, None, MS_BIND)


def _pivot_root() -> None:
    """pivot_root(".", "."): the current directory becomes the root, the old root stays stacked under it
    (detached by the caller). glibc exports the call; elsewhere the raw system call (x86-64: 155, arm64: 41)."""
    if hasattr(libc, "pivot_root"):
        ok(libc.pivot_root(b".", b"."))
        return
    number = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
    if number is None:
        raise OSError(f"no pivot_root for {os.uname().machine}")
    ok(libc.syscall(ctypes.c_long(number), b".", b"."))


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
