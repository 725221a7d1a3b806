"""Where a staged weight version lives, who may remove it, and one staged copy per node at a time.

``shm.write_version`` stages one version as one file (``lagrl-weights-...``) in one of two staging
directories: ``/dev/shm`` (tmpfs: its pages are RAM) or a private ``lagrl-staging-<uid>`` directory
under the system's temporary directory (on disk). This module chooses between them, names and holds
the file while its writer lives, removes what dead writers left, and serialises a node's actors.

Which directory (:func:`staging_dir`): ``/dev/shm`` when it is writable, its filesystem has room for
the version plus ``SHM_HEADROOM`` AND available memory (``psutil.virtual_memory().available``)
stays ``MEMORY_HEADROOM`` above the version; else the private directory when its filesystem has
room (and, should it be a tmpfs too, memory has); else :class:`NoRoomToStage`, naming the sizes.

Name: ``lagrl-weights-<boot id[:8]>-<pid>.<start ticks>-<tag>-<random>``: which process of which boot
wrote it (a reused pid or another boot never share that identity). It is for humans reading
``/dev/shm``, and it tells the sweep which files are staged versions at all (this form, or the
``lagrl-weights-<pid>-`` of earlier versions; any other file is left alone), never whether one is live.

Liveness, the authority: the writer holds ``flock(LOCK_SH)`` on its file from creation until it
removes it, and the kernel drops the lock when the process dies, however it dies and in whatever
pid namespace (containers sharing ``/dev/shm`` see different pids; a pid check was wrong there and
after pid reuse). :func:`sweep` removes a file only while it holds ``LOCK_EX | LOCK_NB`` on it: no
live process holds it. A file of another boot is removed for that reason too, not by its name (by
name alone a live writer's file would go on a temporary directory shared between hosts, where
flock still sees the other host's lock). A writer whose just-created file a sweep removed before
the writer locked it sees it unlinked and makes another. A child forked (without exec) while a file
is held would hold it too: forked children close the holds (``os.register_at_fork``). Another
user's file is never removed (it cannot be opened, or root sees another owner).

When: :func:`sweep` covers both directories and runs on every write, at actor start (the object
store transport's ``attach``), at actor stop (``GenerationActorImpl.run``'s end) and at run end (the
driver's ``_shutdown``).

One copy per node: :func:`node_lock`, an exclusive flock on ``lagrl-staging.lock`` in ``/dev/shm``
(else in the private directory; the empty lock file stays), is held around write -> load -> remove,
so a node's N actors hold one staged copy at a time, not N. Uncontended it costs ~8 us (open, flock,
close): the tiny model's ``load_into`` (1.8 MB) took a median 18.4 ms with it and 18.7 ms without
(100 each, interleaved, 2 cores). Contended, an actor waits for the others' write + load; it
heartbeats meanwhile (``on_wait``).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import tempfile
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

SHM = Path("/dev/shm")
PREFIX = "lagrl-weights-"
STAGED_NAME = re.compile(rf"{PREFIX}(?:[0-9a-f]{{8}}-)?\d+(?:\.\d+)?-")   # boot-pid.ticks-, or pid- (earlier)
LOCK_NAME = "lagrl-staging.lock"
SHM_HEADROOM = 64 << 20        # /dev/shm keeps this much free beside the version
MEMORY_HEADROOM = 512 << 20    # available memory stays this far above a version staged in RAM
DISK_HEADROOM = 64 << 20       # the private directory's filesystem keeps this much free
LOCK_TIMEOUT_S = 600.0         # a node lock held this long: its holder is stuck (a hung engine load)
_CLOEXEC = os.O_CLOEXEC | os.O_NOFOLLOW

_HELD: set[int] = set()        # descriptors whose flock this process holds (staged files, node lock)


class NoRoomToStage(OSError):
    """Neither staging directory has room (or memory) for a version."""


def _close_held_in_child() -> None:
    # a forked child shares the parent's locks; closing its copies keeps the locks the parent's alone
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


def release(fd: int) -> None:
    """Drop this process's hold on ``fd`` (a no-op in a forked child, which closed its copy already)."""
    if fd in _HELD:
        _HELD.discard(fd)
        os.close(fd)


# ---- names
@lru_cache(maxsize=1)
def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    except OSError:
        return "0" * 32            # no /proc: still a name the sweep recognises


def start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), "0" if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()   # after the command name, which may hold spaces
        return fields[19].decode()
    except (OSError, IndexError):
        return "0"


def identity() -> str:
    """``<boot id[:8]>-<pid>.<start ticks>``: this process, unlike any other of any boot."""
    pid = os.getpid()
    return f"{boot_id()[:8]}-{pid}.{start_ticks(pid)}"


# ---- where
def private_dir() -> Path:
    """``lagrl-staging-<uid>`` under the temporary directory, this user's alone (made if missing)."""
    private = Path(tempfile.gettempdir()) / f"lagrl-staging-{os.getuid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    if private.stat().st_uid != os.getuid():
        raise PermissionError(f"{private} belongs to another user: set TMPDIR to a directory of your own")
    return private


def staging_dirs() -> list[Path]:
    """Both directories a version may be staged in (the private one only where it exists)."""
    private = Path(tempfile.gettempdir()) / f"lagrl-staging-{os.getuid()}"
    return [d for d in (SHM, private) if d.is_dir()]


def free_bytes(directory: Path) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def available_memory() -> int:
    import psutil

    return psutil.virtual_memory().available


def in_memory(directory: Path) -> bool:
    """Whether ``directory`` is on a tmpfs/ramfs (its files are RAM, like /dev/shm's)."""
    import psutil

    path, best = str(directory.resolve()), ("", "")
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint.rstrip("/") + "/"
        if (path + "/").startswith(mount) and len(mount) > len(best[0]):
            best = (mount, part.fstype)
    return best[1] in ("tmpfs", "ramfs")


def staging_dir(nbytes: int) -> Path:
    """``/dev/shm`` when it has room and memory for ``nbytes``, else the private directory when its
    disk has room; else :class:`NoRoomToStage` with the sizes."""
    memory = available_memory()
    memory_ok = memory >= nbytes + MEMORY_HEADROOM
    shm_free = free_bytes(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK) else 0
    if memory_ok and shm_free >= nbytes + SHM_HEADROOM:
        return SHM
    private = private_dir()
    disk_free = free_bytes(private)
    if disk_free >= nbytes + DISK_HEADROOM and (memory_ok or not in_memory(private)):
        return private
    mb = lambda n: f"{n / 2**20:.0f} MiB"     # noqa: E731
    raise NoRoomToStage(f"no room to stage a {mb(nbytes)} weight version: {SHM} has {mb(shm_free)} free, "
                        f"available memory is {mb(memory)} (RAM staging keeps {mb(MEMORY_HEADROOM)} beside it), "
                        f"{private} has {mb(disk_free)} free; free memory or disk, or point TMPDIR at a larger disk")


# ---- a writer's file
def create_held(directory: Path, tag: str) -> tuple[Path, int]:
    """A new empty file in ``directory`` named for this process, open read-write and held (LOCK_SH)
    until :func:`release`."""
    while True:
        path = directory / f"{PREFIX}{identity()}-{tag}-{secrets.token_hex(4)}"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | _CLOEXEC, 0o600)
        _HELD.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if os.fstat(fd).st_nlink:       # 0: a sweep took it between create and lock
                return path, fd
        except BaseException:
            release(fd)
            path.unlink(missing_ok=True)
            raise
        release(fd)


def sweep(directories: list[Path] | None = None) -> list[str]:
    """Remove the staged files (in both staging directories) that no live writer holds; their names."""
    removed = []
    for directory in staging_dirs() if directories is None else directories:
        try:
            paths = sorted(directory.glob(f"{PREFIX}*"))
        except OSError:
            continue
        removed += [path.name for path in paths if STAGED_NAME.match(path.name) and _remove_if_abandoned(path)]
    return removed


def _remove_if_abandoned(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except OSError:                 # gone meanwhile, another user's (PermissionError), a symlink
        return False
    try:
        if os.fstat(fd).st_uid != os.getuid():   # root opens anyone's: still not ours to remove
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:             # BlockingIOError: its writer lives
            return False
        try:
            path.unlink()
        except OSError:             # another sweep was first, or the directory forbids it
            return False
        return True
    finally:
        os.close(fd)


# ---- one copy per node
def _open_node_lock() -> int:
    error: OSError | None = None
    for directory in (SHM, None):
        try:
            path = (directory or private_dir()) / LOCK_NAME
            try:
                return os.open(path, os.O_RDONLY | _CLOEXEC)
            except FileNotFoundError:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | _CLOEXEC, 0o644)
                os.fchmod(fd, 0o644)        # another user's actors on this node wait on it too
                return fd
        except OSError as exc:
            error = exc
    raise error


@contextmanager
def node_lock(timeout_s: float = LOCK_TIMEOUT_S, on_wait: Callable[[], None] | None = None) -> Iterator[float]:
    """Hold the node's staging lock for the body (yields the seconds waited for it). ``on_wait`` runs
    about once a second while waiting (the actor's heartbeat)."""
    fd = _open_node_lock()
    _HELD.add(fd)
    try:
        t0 = beat = time.monotonic()
        pause = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # polled: a blocking flock cannot time out
                break
            except BlockingIOError:
                pass
            now = time.monotonic()
            if now - t0 > timeout_s:
                raise TimeoutError(f"waited {timeout_s:.0f} s for this node's weight staging lock "
                                   f"({LOCK_NAME}): another process has held it that long (a hung engine load?)")
            if on_wait is not None and now - beat >= 1.0:
                on_wait()
                beat = now
            time.sleep(pause)
            pause = min(2 * pause, 0.005)     # a freed lock is seen within 5 ms
        yield time.monotonic() - t0
    finally:
        release(fd)
