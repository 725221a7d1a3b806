"""One memory cgroup per sandbox run, where the machine lets us make one (threat model: rewards/sandbox/runner.py).

Why: per-process limits (RLIMIT_AS) and summed RSS miss memory that no process maps: memfd and
tmpfs files, SysV segments, socket and pipe buffers. The kernel charges all of those to the cgroup of
the process that allocated them, and refuses or OOM-kills inside that cgroup at its limit, so a cgroup
bounds the sandbox as a whole. The host (rewards.sandbox) creates it under its own cgroup, moves the
launcher into it before the launcher forks anything (so every sandbox process is born inside), and
removes it afterwards; init reads its counters per test. A worker that dies first (SIGKILL, a crash)
leaves its cgroups behind: their names carry the owner (pid and start time), and sweep_stale(), run
when a reward worker starts, removes those whose owner is gone, nothing else.

CPU: where the cpu controller can be used, the sandbox also gets a CPU quota of `cpus` cores (cpu.max
on v2; on v1 a twin cgroup of the same name in the cpu hierarchy, cpu.cfs_quota_us/cfs_period_us), so
the program's threads and processes together get at most that much CPU time per wall-clock second: a
parallel busy loop cannot starve the host (RLIMIT_CPU bounds each process's total, not its rate).
Best effort: cpu_limited() says whether it is in force ("cpu" in the sandbox's isolation).

Where it works: cgroup v1 with a writable memory hierarchy (this project's machines: root in a VM),
or cgroup v2 where our own cgroup already delegates the memory controller to children. Elsewhere
(e.g. a container with a read-only /sys/fs/cgroup) create() returns None and the sandbox relies on
its seccomp filter and RSS watchdog. Loaded by path from init.py: stdlib only.
"""

import os
import re
import secrets
import signal
import time

V1_ROOT, V1_CPU_ROOT, V2_ROOT = "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"
PERIOD_US = 100_000  # the CPU quota's accounting period
PREFIX = "lagrl-sbx-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)\.(\d+)-[0-9a-f]{16}")  # PREFIX<owner pid>.<its start ticks>-<random>


def _own() -> list[list[str]]:
    """/proc/self/cgroup as [hierarchy, controllers, path] rows ([] where unreadable)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            return [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return []


def _v1_parent(lines: list[list[str]], root: str, controller: str) -> str | None | bool:
    """Our own cgroup's directory in the v1 hierarchy of `controller` if children can be made under it;
    None if it cannot; False if there is no such v1 hierarchy."""
    for _, controllers, path in lines:
        if controller in controllers.split(",") and os.path.isdir(root):
            parent = os.path.join(root, path.lstrip("/"))
            return parent if os.access(parent, os.W_OK) else None
    return False


def _parent() -> str | None:
    """Our own memory cgroup's directory if children can be made under it, else None."""
    lines = _own()
    v1 = _v1_parent(lines, V1_ROOT, "memory")
    if v1 is not False:
        return v1
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "" and os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")):
            parent = os.path.join(V2_ROOT, path.lstrip("/"))
            try:
                with open(os.path.join(parent, "cgroup.subtree_control"), encoding="ascii") as f:
                    delegated = "memory" in f.read().split()
            except OSError:
                return None
            return parent if delegated and os.access(parent, os.W_OK) else None
    return None


def _is_v1(path: str) -> bool:
    return path.startswith(V1_ROOT + "/")


def _write(path: str, name: str, value: str) -> None:
    with open(os.path.join(path, name), "w", encoding="ascii") as f:
        f.write(value)


def _read(path: str, name: str, dir_fd: int | None = None) -> str:
    """`path`/`name`, or `name` relative to the directory descriptor `dir_fd` when one is given."""
    opener = None if dir_fd is None else (lambda file, flags: os.open(file, flags, dir_fd=dir_fd))
    with open(name if dir_fd is not None else os.path.join(path, name), encoding="ascii", opener=opener) as f:
        return f.read()


def _cpu_twin(path: str) -> str | None:
    """v1: the cgroup of the same name in the cpu hierarchy (None on v2 or without a writable one)."""
    if not _is_v1(path):
        return None
    parent = _v1_parent(_own(), V1_CPU_ROOT, "cpu")
    return os.path.join(parent, os.path.basename(path)) if parent else None


def create(limit_bytes: int, cpus: float | None = None) -> str | None:
    """A fresh cgroup limited to `limit_bytes` (no swap), or None where the machine does not allow one;
    with `cpus`, also limited to that many cores' worth of CPU time where the cpu controller allows."""
    parent = _parent()
    if parent is None:
        return None
    path = os.path.join(parent, f"{PREFIX}{os.getpid()}.{_start_ticks(os.getpid())}-{secrets.token_hex(8)}")
    try:
        os.mkdir(path, 0o755)
    except OSError:
        return None
    try:
        if _is_v1(path):
            _write(path, "memory.limit_in_bytes", str(limit_bytes))
            if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                _write(path, "memory.memsw.limit_in_bytes", str(limit_bytes))  # memory + swap: no swap
        else:
            _write(path, "memory.max", str(limit_bytes))
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(path, "memory.swap.max", "0")
    except OSError:
        remove(path)
        return None
    if cpus:
        _limit_cpu(path, cpus)
    return path


def _limit_cpu(path: str, cpus: float) -> None:
    """Best effort: a missing or refusing cpu controller leaves the sandbox without a quota."""
    quota = max(1000, int(cpus * PERIOD_US))  # the kernel's minimum is 1 ms
    twin = _cpu_twin(path)
    try:
        if twin is not None:
            os.mkdir(twin, 0o755)
            _write(twin, "cpu.cfs_period_us", str(PERIOD_US))
            _write(twin, "cpu.cfs_quota_us", str(quota))
        elif os.path.exists(os.path.join(path, "cpu.max")):  # v2, with the controller delegated to us
            _write(path, "cpu.max", f"{quota} {PERIOD_US}")
    except OSError:
        if twin is not None:
            _remove_one(twin, 1.0)


def cpu_limited(path: str) -> bool:
    """Is the cgroup's CPU quota in force (after adopt())?"""
    twin = _cpu_twin(path)
    if twin is not None:
        return os.path.isdir(twin)
    try:
        return not _read(path, "cpu.max").startswith("max")
    except OSError:
        return False


def adopt(path: str, pid: int) -> bool:
    """Move process `pid` (the sandbox's launcher, before it forks anything) into the cgroup (and its v1
    cpu twin: if that move fails the twin goes, so cpu_limited() stays true to what is in force)."""
    try:
        _write(path, "cgroup.procs", str(pid))
    except OSError:
        return False
    twin = _cpu_twin(path)
    if twin is not None and os.path.isdir(twin):
        try:
            _write(twin, "cgroup.procs", str(pid))
        except OSError:
            _remove_one(twin, 1.0)
    return True


def counters(path: str, dir_fd: int | None = None) -> tuple[int, int]:
    """(times an allocation failed at the limit, OOM kills) since the cgroup was made; a test reads them
    before and after. Some kernels keep the first at 0 (v1 here does): an OOM kill is the signal that
    always counts. On v2 the first is memory.events' ``oom``, not ``max``: ``max`` also counts the times
    reclaim (of page cache, say) brought usage back under the limit, which an honest program near its
    limit does without ever lacking memory. v1 has only ``failcnt``, which counts those too: 0 there.
    `dir_fd`: the cgroup's directory opened earlier (the sandbox's init reads it from a root without /sys)."""
    if _is_v1(path):
        hits = 0
        fields = dict(line.split() for line in _read(path, "memory.oom_control", dir_fd).splitlines() if line.strip())
    else:
        fields = dict(line.split() for line in _read(path, "memory.events", dir_fd).splitlines() if line.strip())
        hits = int(fields.get("oom", 0))
    return hits, int(fields.get("oom_kill", 0))


def remove(path: str, timeout_s: float = 5.0) -> bool:
    """SIGKILL whatever is still in the cgroup (only sandbox processes ever join it), then remove it and
    its cpu twin."""
    twin = _cpu_twin(path)
    done = _remove_one(path, timeout_s)
    if twin is not None and os.path.isdir(twin):
        done = _remove_one(twin, timeout_s) and done
    return done


def _remove_one(path: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: processes still inside (or dying)
            if time.monotonic() > deadline:
                return False
        try:
            pids = [int(p) for p in _read(path, "cgroup.procs").split()]
        except OSError:
            pids = []
        for pid in pids:
            _kill_member(pid, os.path.basename(path))
        time.sleep(0.005)


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, an
    identity that a reused pid does not share. None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None


def sweep_stale() -> list[str]:
    """Remove the cgroups (and kill what is left in them) that this project made for a process that is
    gone: only names of create()'s form whose owner pid no longer runs with the recorded start time.
    Others' cgroups, live owners' and the old random-only names are never touched; the v1 cpu
    hierarchy is swept the same way. -> removed paths."""
    removed = []
    for parent in (_parent(), _v1_parent(_own(), V1_CPU_ROOT, "cpu")):
        try:
            entries = list(os.scandir(parent)) if parent else []
        except OSError:
            continue
        for entry in entries:
            match = _NAME.fullmatch(entry.name)
            if match and entry.is_dir(follow_symlinks=False) and _start_ticks(int(match[1])) != match[2]:
                if _remove_one(entry.path, 5.0):
                    removed.append(entry.path)
    return removed


def _kill_member(pid: int, name: str) -> None:
    """SIGKILL `pid` only if it is still in our cgroup: the pidfd pins the process, so a pid reused
    after we read cgroup.procs is checked, not killed blindly."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
            if name in f.read():
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)
