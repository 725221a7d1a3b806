"""What every sandbox test checks afterwards: nothing of any sandbox survives, the host is healthy."""

from __future__ import annotations

import glob
import os
import time

import psutil
import pytest

try:
    from rewards.sandbox import cgroup as sandbox_cgroup
except ImportError:  # a checkout from before per-sandbox cgroups (the tests also run against it)
    sandbox_cgroup = None

SANDBOX_UID_MIN = 100_000  # private uids: programs from 100000, judges from 100000 + 2**24


def _memory_cgroup(pid: int | str) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
            return next((line.split(":", 2)[2].strip() for line in f if "memory" in line.split(":")[1].split(",")),
                        None)
    except (OSError, IndexError):
        return None


def leftover_processes() -> list[psutil.Process]:
    """Processes of a sandbox uid started by *this* test process: where cgroup v1 memory is mounted,
    ours are in our own memory cgroup or below it (others sharing the machine run sandboxes too)."""
    own = _memory_cgroup("self")
    out = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] and p.info["uids"].real >= SANDBOX_UID_MIN:
                theirs = _memory_cgroup(p.pid)
                if own is None or theirs is None or theirs == own or theirs.startswith(own.rstrip("/") + "/"):
                    out.append(p)
        except psutil.Error:
            pass
    return out


def leftover_cgroups() -> list[str]:
    parent = sandbox_cgroup._parent() if sandbox_cgroup else None
    left = glob.glob(f"{parent}/{sandbox_cgroup.PREFIX}*") if parent else []
    cpu = getattr(sandbox_cgroup, "V1_CPU_ROOT", None)
    if cpu and parent:  # v1 cpu twins: that hierarchy is shared with every sandbox here, so only ours
        cpu_parent = sandbox_cgroup._v1_parent(sandbox_cgroup._own(), cpu, "cpu")
        left += glob.glob(f"{cpu_parent}/{sandbox_cgroup.PREFIX}{os.getpid()}.*") if cpu_parent else []
    return left


def assert_nothing_survives(rss_before: int, max_growth: int = 64 << 20) -> None:
    deadline = time.monotonic() + 2.0
    while (leftover_processes() or leftover_cgroups()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leftover_processes(), "sandbox processes survived"
    assert not leftover_cgroups(), "a sandbox cgroup survived"
    assert psutil.Process().memory_info().rss - rss_before < max_growth


@pytest.fixture(autouse=True)
def host_stays_healthy():
    """Every test of a module that imports this fixture: nothing of its sandboxes survives it, and this
    process's memory grew at most by assert_nothing_survives' bound."""
    before = psutil.Process().memory_info().rss
    yield
    assert_nothing_survives(before)
