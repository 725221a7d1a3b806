"""usable_cpus: the affinity mask and the cgroup CPU quota (v1 and v2), read from fake cgroup trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rewards import cpus
from rewards.cpus import cgroup_cpu_quota, usable_cpus


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _v1(tmp_path: Path, own: str, quotas: dict[str, int], mount: str = "cpu", period: int = 100_000) -> tuple[str, str]:
    """A v1 tree: the cpu controller mounted at <root>/<mount>; ``quotas``: cgroup path -> cfs_quota_us."""
    root = tmp_path / "cgroup"
    for path, quota in quotas.items():
        d = root / mount / path.lstrip("/")
        _write(d / "cpu.cfs_quota_us", f"{quota}\n")
        _write(d / "cpu.cfs_period_us", f"{period}\n")
    (root / mount / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    _write(tmp_path / "cgroup.txt", f"5:memory:/x\n3:{'cpu,cpuacct' if ',' in mount else 'cpu'}:{own}\n0::/\n")
    return str(tmp_path / "cgroup.txt"), str(root)


def _v2(tmp_path: Path, own: str, limits: dict[str, str]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for path, cpu_max in limits.items():
        _write(root / path.lstrip("/") / "cpu.max", cpu_max + "\n")
    (root / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    _write(tmp_path / "cgroup.txt", f"0::{own}\n")
    return str(tmp_path / "cgroup.txt"), str(root)


@pytest.fixture
def eight_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(os, "cpu_count", lambda: 64)


def test_v1_quota_of_our_cgroup_caps_the_affinity(tmp_path, eight_cpus):
    files = _v1(tmp_path, "/docker/abc", {"/": -1, "/docker": -1, "/docker/abc": 300_000})
    assert cgroup_cpu_quota(*files) == 3.0
    assert usable_cpus(*files) == 3
    # an ancestor's quota binds too, and the tightest one wins
    files = _v1(tmp_path, "/a/b", {"/a": 150_000, "/a/b": 400_000})
    assert cgroup_cpu_quota(*files) == 1.5 and usable_cpus(*files) == 1


def test_v1_mounted_as_cpu_cpuacct_and_a_container_that_sees_the_host_path(tmp_path, eight_cpus):
    # the container's mount shows only its own cgroup, at the mount's root, while /proc/self/cgroup names the
    # host's path for it: the mount's root is ours
    root = tmp_path / "cgroup" / "cpu,cpuacct"
    _write(root / "cpu.cfs_quota_us", "250000\n")
    _write(root / "cpu.cfs_period_us", "100000\n")
    _write(tmp_path / "cgroup.txt", "3:cpu,cpuacct:/kubepods/pod1/c1\n")
    assert usable_cpus(str(tmp_path / "cgroup.txt"), str(tmp_path / "cgroup")) == 2


def test_v2_cpu_max(tmp_path, eight_cpus):
    files = _v2(tmp_path, "/user.slice/job", {"/user.slice": "max 100000", "/user.slice/job": "200000 100000"})
    assert cgroup_cpu_quota(*files) == 2.0 and usable_cpus(*files) == 2
    files = _v2(tmp_path / "b", "/svc", {"/svc": "max 100000"})
    assert cgroup_cpu_quota(*files) is None and usable_cpus(*files) == 8      # no quota: the affinity


def test_the_affinity_when_it_is_tighter_and_never_below_one(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5})
    files = _v1(tmp_path, "/", {"/": 1_600_000})
    assert usable_cpus(*files) == 2                      # pinned to two cores: 16 cores of quota do not help
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    files = _v2(tmp_path / "b", "/tiny", {"/tiny": "50000 100000"})
    assert usable_cpus(*files) == 1                      # half a core: one worker, not zero


def test_missing_or_garbled_files_mean_no_quota(tmp_path, eight_cpus):
    assert cgroup_cpu_quota(str(tmp_path / "absent"), str(tmp_path)) is None
    _write(tmp_path / "cgroup.txt", "garbage\n1:cpu:/x\n")
    _write(tmp_path / "cgroup" / "cpu" / "x" / "cpu.cfs_quota_us", "not a number\n")
    assert usable_cpus(str(tmp_path / "cgroup.txt"), str(tmp_path / "cgroup")) == 8


def test_this_machine():
    """The real files: never more than the affinity mask, at least one."""
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))
    assert cpus.PROC_CGROUP == "/proc/self/cgroup"


def test_the_reward_pool_default_is_what_this_process_may_use(monkeypatch):
    """Not os.cpu_count(): a job pinned to one core of a 64-core machine gets one reward worker, not 64."""
    from rewards.config import RewardConfig

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert RewardConfig().resolved_num_workers() == 1
    assert RewardConfig(num_workers=3).resolved_num_workers() == 3
