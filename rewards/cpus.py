"""usable_cpus: how many CPUs this process may really use, for sizing a pool of workers.

os.cpu_count() is the machine's count: in a container limited by a CPU quota, or a job pinned to a few
cores, it overcounts, and workers that run programs under wall-clock limits then slow each other into
timeouts. The answer here is the smallest of the affinity mask (os.sched_getaffinity) and the CPU quota
of our cgroup and its ancestors (cgroup v2 ``cpu.max``; v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``),
rounded down (a worker past the quota is throttled, not run), at least 1.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
# where a v1 hierarchy holding the cpu controller is mounted, under CGROUP_ROOT, by distribution habit
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def usable_cpus(proc_cgroup: str = PROC_CGROUP, cgroup_root: str = CGROUP_ROOT) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):      # no affinity on this platform
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(proc_cgroup, cgroup_root)
    if quota is not None:
        cpus = min(cpus, math.floor(quota))
    return max(1, cpus)


def cgroup_cpu_quota(proc_cgroup: str = PROC_CGROUP, cgroup_root: str = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota, in cores, on our cgroup or an ancestor (v1 and v2 both read where mounted);
    None when there is none or it cannot be read."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":                                    # "0::/path": the v2 hierarchy
            quotas += _walk(Path(cgroup_root), path, _v2_quota)
        elif "cpu" in controllers.split(","):
            for name in _V1_CPU_DIRS:
                if (Path(cgroup_root) / name).is_dir():
                    quotas += _walk(Path(cgroup_root) / name, path, _v1_quota)
                    break
    return min(quotas, default=None)


def _walk(mount: Path, path: str, read) -> list[float]:
    """The quotas from our cgroup up to the mount's root. A container often sees the host's path for its
    cgroup while the mount shows only its own subtree: then the mount's root is ours."""
    here = mount / path.lstrip("/")
    if not here.is_dir():
        here = mount
    found = []
    while True:
        quota = read(here)
        if quota is not None:
            found.append(quota)
        if here == mount or mount not in here.parents:
            return found
        here = here.parent


def _v2_quota(d: Path) -> float | None:
    try:
        quota, period = (d / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(d: Path) -> float | None:
    try:
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period
