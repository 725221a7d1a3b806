"""The sandbox's stdlib-only parts on their own: the judge's wire format, the memory cgroup, the
unix-socket meter and the seccomp program (their effect inside a sandbox: test_rewards_sandbox_attacks)."""

from __future__ import annotations

import math
import os
import secrets
import socket
import subprocess
import sys
import time

import pytest

from rewards.sandbox import cgroup as sandbox_cgroup
from rewards.sandbox import seccomp as sandbox_seccomp
from rewards.sandbox import sockets as sandbox_sockets
from rewards.sandbox import wire

PLAIN = [None, True, 0, -7, 2 ** 80, -(2 ** 60), 1.5, math.inf, "s", [1, [2]], (1, (2,)), {3, 4}, frozenset({5}),
         {"a": 1, 2: [3], (4, 5): None}, b"\x00\xff", 1 + 2j, []]


@pytest.mark.parametrize("value", PLAIN, ids=[type(v).__name__ + str(i) for i, v in enumerate(PLAIN)])
def test_wire_round_trip_keeps_exact_types(value):
    back = wire.decode(wire.encode(value))
    assert back == value and type(back) is type(value)


def test_wire_nan_and_nesting():
    assert math.isnan(wire.decode(wire.encode(float("nan"))))
    deep = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError):
        wire.encode(deep)


class LyingInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [LyingInt(3), [LyingInt(3)], object(), lambda: 1])
def test_wire_refuses_what_is_not_plain_data(value):
    with pytest.raises(TypeError):
        wire.encode(value)
    tags = []
    assert wire.encode(value, handle=lambda x: tags.append(x) or {"h": len(tags) - 1}) is not None
    assert tags  # with a handle callback, the object stays behind a reference instead


@pytest.mark.parametrize("message", [{"x": 1}, {"t": 1}, {"d": [[[1], 2]]}, {"c": ["a", 1]}, {"h": 0},
                                     {"i": "zz"}, {"a": 1, "b": 2}])
def test_wire_rejects_malformed_values(message):
    with pytest.raises((ValueError, TypeError)):
        wire.decode(message)


def test_wire_frames_are_capped_and_a_closed_channel_is_named():
    a, b = socket.socketpair()
    with a, b:
        wire.send(a.fileno(), {"d": [["k", "v" * 1000]]})
        with pytest.raises(ValueError):
            wire.recv(b.fileno(), 100)
    a, b = socket.socketpair()
    with b:
        a.close()
        with pytest.raises(wire.ChannelClosed):
            wire.recv(b.fileno(), 100)


def test_cgroup_lifecycle_kills_what_is_left():
    path = sandbox_cgroup.create(64 << 20)
    if path is None:
        pytest.skip("this host lets us make no memory cgroup")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert sandbox_cgroup.adopt(path, sleeper.pid)
        assert sandbox_cgroup.counters(path) == (0, 0)
        assert sandbox_cgroup.remove(path)
        assert sleeper.wait(timeout=5) == -9 and not os.path.exists(path)
    finally:
        sleeper.kill()
        sandbox_cgroup.remove(path)


def test_cgroup_counts_an_oom_kill():
    path = sandbox_cgroup.create(32 << 20)
    if path is None:
        pytest.skip("this host lets us make no memory cgroup")
    hog = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.read(1); x = bytearray(64 << 20)"],
                           stdin=subprocess.PIPE)
    try:
        assert sandbox_cgroup.adopt(path, hog.pid)
        hog.stdin.close()  # now allocate, inside the cgroup
        hog.wait(timeout=10)
        _, ooms = sandbox_cgroup.counters(path)  # (the limit-hit count is not kept by every kernel)
        assert ooms >= 1 and hog.returncode == -9
    finally:
        hog.kill()
        sandbox_cgroup.remove(path)


def test_cgroup_cpu_quota_bounds_a_busy_process():
    path = sandbox_cgroup.create(64 << 20, cpus=0.2)
    if path is None:
        pytest.skip("this host lets us make no memory cgroup")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert sandbox_cgroup.adopt(path, spinner.pid)
        if not sandbox_cgroup.cpu_limited(path):
            pytest.skip("no usable cpu controller here")
        before, start = _cpu_seconds(spinner.pid), time.monotonic()
        time.sleep(1.0)
        used, wall = _cpu_seconds(spinner.pid) - before, time.monotonic() - start
        assert used <= 0.2 * wall + 0.15, (used, wall)  # the quota, plus one accounting period of slack
    finally:
        spinner.kill()
        sandbox_cgroup.remove(path)
    assert not os.path.exists(path)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_stale_cgroups_of_dead_owners_are_swept():
    """A worker killed mid-run leaves its sandbox cgroup (and maybe a process in it). The sweep removes
    exactly those whose recorded owner is gone: not a live owner's, not a name without an owner."""
    parent = sandbox_cgroup._parent()
    if parent is None:
        pytest.skip("this host lets us make no memory cgroup")
    owner = subprocess.Popen(["sleep", "60"])   # the crashed worker: its identity, then its death
    ticks = sandbox_cgroup._start_ticks(owner.pid)
    owner.kill()
    owner.wait()
    stale = os.path.join(parent, f"{sandbox_cgroup.PREFIX}{owner.pid}.{ticks}-{secrets.token_hex(8)}")
    unowned = os.path.join(parent, sandbox_cgroup.PREFIX + secrets.token_hex(8))  # names before owners were kept
    live = sandbox_cgroup.create(64 << 20)
    os.mkdir(stale)
    os.mkdir(unowned)
    left = subprocess.Popen(["sleep", "60"])
    try:
        assert sandbox_cgroup.adopt(stale, left.pid)
        removed = sandbox_cgroup.sweep_stale()
        assert stale in removed and not os.path.exists(stale) and left.wait(timeout=5) == -9
        assert live not in removed and unowned not in removed and os.path.isdir(live) and os.path.isdir(unowned)
    finally:
        left.kill()
        for path in (stale, unowned, live):
            sandbox_cgroup.remove(path)


def test_unix_socket_meter_sees_unread_buffers():
    try:
        meter = sandbox_sockets.UnixSocketMemory()
    except OSError:
        pytest.skip("no unix_diag in this kernel")
    before = meter.held()
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        sent = 0
        try:
            while True:
                sent += a.send(b"x" * 65536)
        except BlockingIOError:
            pass
        grown = meter.held() - before
        assert sent <= grown < 4 * sent + (1 << 20)  # allocated sizes include the per-buffer overhead
    time.sleep(0.01)
    meter.close()


def test_seccomp_program_shape():
    program = sandbox_seccomp.filter_program()
    if program is None:
        pytest.skip(f"no system-call table for {os.uname().machine}")
    assert len(program) % 8 == 0 and len(program) // 8 < 4096  # struct sock_filter, BPF_MAXINSNS
