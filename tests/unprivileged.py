"""Run a command as an ordinary user, from a test running as root: what a cluster account or a pod
without CAP_SYS_ADMIN is (DESIGN.md §10b).

    python -m tests.unprivileged --uid 64123 [--no-userns] -- python script.py ...

Started as root, it enters a private mount namespace, makes the interpreter and the checkout reachable
for other users there (an interpreter under /root, as pyenv installs it, is not: /root is 0700; a tmpfs
with mode 0755 over the blocking directory holds binds of just those trees), then drops to ``--uid``
with no groups and no capabilities, and execs the command. ``--no-userns`` also installs a seccomp
filter that refuses user namespaces (unshare(2) and clone(2) with CLONE_NEWUSER return EPERM), as a
container's default seccomp profile or a host with user.max_user_namespaces = 0 does.
Nothing of the host changes: the mounts live and die with the command's mount namespace.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import platform
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from rewards.sandbox import fs

CHECKOUT = str(Path(__file__).resolve().parents[1])
UID_RANGE = range(60_000, 65_000)   # below the sandbox's private uids (100000+), clear of nobody (65534)


def needed_trees() -> list[str]:
    """What the command reads: the Python installation (venv and base) and the checkout."""
    return sorted({*fs.python_paths(), CHECKOUT})


def blocking_ancestor(path: str) -> str | None:
    """The outermost directory above ``path`` that other users cannot traverse (no o+x), if any."""
    parts = Path(path).parts
    for i in range(2, len(parts)):
        ancestor = str(Path(*parts[:i]))
        if not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def readable_by_others(path: str) -> bool:
    """Could another user list ``path`` once it is reachable (o+rx on the tree's top)?"""
    return os.stat(path).st_mode & 0o005 == 0o005


def free_uid() -> int:
    """A uid with no account and no process: nobody else's files or processes can be touched through it."""
    import psutil
    import pwd

    used = {p.info["uids"].real for p in psutil.process_iter(["uids"]) if p.info["uids"]}
    for uid in UID_RANGE:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in used:
                return uid
    raise RuntimeError(f"no free uid in {UID_RANGE}")


def _open_for_others(trees: list[str]) -> None:
    """In our private mount namespace: a 0755 tmpfs over each blocking directory, holding the trees below it."""
    blocked: dict[str, list[str]] = {}
    for tree in trees:
        top = blocking_ancestor(tree)
        if top is not None:
            blocked.setdefault(top, []).append(tree)
    for top, below in blocked.items():
        under = os.open(top, os.O_PATH)      # the trees stay reachable through it once the tmpfs covers top
        fs.mount("tmpfs", top, "tmpfs", 0, "mode=0755,size=1m")
        for tree in below:
            inside = os.path.relpath(tree, top)
            os.makedirs(os.path.join(top, inside), exist_ok=True)
            fs.mount(f"/proc/self/fd/{under}/{inside}", os.path.join(top, inside), None, fs.MS_BIND | fs.MS_REC)
        os.close(under)


def _deny_user_namespaces() -> None:
    """A seccomp filter: unshare(2) and clone(2) with CLONE_NEWUSER fail with EPERM; everything else runs."""
    numbers = {"x86_64": (0xC000003E, 272, 56), "aarch64": (0xC00000B7, 97, 220)}.get(platform.machine())
    if numbers is None:
        raise OSError(f"no system call table for {platform.machine()}")
    arch, unshare, clone = numbers
    insn = lambda code, k, jt=0, jf=0: struct.pack("=HBBI", code, jt, jf, k)  # noqa: E731 - struct sock_filter
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, deny = insn(ret, 0x7FFF0000), insn(ret, 0x00050000 | errno.EPERM)
    program = b"".join([insn(ld, 4), insn(jeq, arch, 1, 0), allow, insn(ld, 0),
                        insn(jeq, unshare, 0, 1), deny,
                        insn(jeq, clone, 0, 3), insn(ld, 16), insn(jset, 0x10000000, 0, 1), deny,
                        allow])

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = Fprog(len(program) // 8, ctypes.addressof(buf))
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "installing the seccomp filter")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--no-userns", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if os.geteuid() != 0:
        raise SystemExit("tests.unprivileged drops from root; run the command directly as the user you are")
    fs.ok(fs.libc.unshare(fs.CLONE_NEWNS))
    fs.mount(None, "/", None, fs.MS_REC | fs.MS_PRIVATE)
    _open_for_others(needed_trees())
    os.setgroups([])
    os.setresgid(args.uid, args.uid, args.uid)
    os.setresuid(args.uid, args.uid, args.uid)        # from root: every capability is gone with it
    if args.no_userns:
        _deny_user_namespaces()
    os.chdir(tempfile.gettempdir())
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(), "LANG": "C.UTF-8",
           "PYTHONPATH": CHECKOUT, "PYTHONDONTWRITEBYTECODE": "1"}
    os.execve(command[0], command, env)


def run_as(uid: int, command: list[str], *, no_userns: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    """``command`` as ``uid`` (see the module docstring); from root only."""
    argv = [sys.executable, "-m", "tests.unprivileged", "--uid", str(uid), *(["--no-userns"] if no_userns else []),
            "--", *command]
    return subprocess.run(argv, cwd=CHECKOUT, capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":
    main()
