"""The object store's hand-over file (actors.transport.shm, actors.transport.staging): layout, exact
round trip, where a version is staged, and no file outliving its writer.

No vLLM engine: the worker's half (``read_buckets``) is what ``LagrlShmEngine`` feeds to
``model.load_weights``, read here directly. Writers that must die or wait are separate processes
(``_WRITER``), staging into a private ``/dev/shm`` stand-in (``dirs``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from actors.transport import ParamMeta
from actors.transport import staging
from actors.transport.shm import bucket_offsets, read_buckets, write_version
from actors.transport.staging import NoRoomToStage, node_lock, staging_dir, sweep

REPO = Path(__file__).resolve().parents[2]

# A writer in its own process: argv = shm stand-in, mode. Modes: "stage" stages one version, prints its
# path and waits to be killed; "fork" does the same after forking a child that outlives it; "locked"
# stages under the node lock, reports, and removes its file when a line arrives on stdin.
_WRITER = r"""
import json, os, sys, time
from pathlib import Path
import torch
from actors.transport import staging
from actors.transport.shm import write_version

staging.SHM = Path(sys.argv[1])
mode = sys.argv[2]
weights = [("w", torch.ones(256))]
if mode in ("stage", "fork"):
    staged = write_version(weights, f"{mode}-v1")
    child = os.fork() if mode == "fork" else -1
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print(json.dumps({"path": staged.path, "child": child}), flush=True)
    time.sleep(600)
else:
    print(json.dumps({"event": "waiting"}), flush=True)
    with staging.node_lock():
        staged = write_version(weights, "locked-v1")
        now = sorted(p.name for d in staging.staging_dirs() for p in d.glob(staging.PREFIX + "*"))
        print(json.dumps({"event": "staged", "t": time.time(), "path": staged.path, "staged_now": now}), flush=True)
        sys.stdin.readline()
        staged.remove()
        print(json.dumps({"event": "removed", "t": time.time()}), flush=True)
"""


@pytest.fixture
def dirs(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(a /dev/shm stand-in, the private directory's parent as TMPDIR), for this process and its writers."""
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    monkeypatch.setattr(staging, "SHM", shm)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)      # re-read TMPDIR
    return shm, tmp


def _writer(shm: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(shm), mode], cwd=REPO, env=env, text=True,
                            bufsize=1, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _line(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"writer exited ({proc.wait()})"
    return json.loads(line)


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


class _Engine:
    """What ``RayObjectStoreTransport.attach`` touches of a vLLM engine."""

    def init_weight_transfer_engine(self, info: dict) -> None:
        pass


def _actor_start() -> None:
    """What a generation actor calls at start once its engine is built (``transport.attach``)."""
    from actors.transport.object_store import RayObjectStoreTransport

    RayObjectStoreTransport("run").attach("actor-0", _Engine())


def _tensors() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [("embed", torch.randn(40, 8, generator=g)),                   # 1280 B
            ("norm", torch.randn(3, generator=g).to(torch.bfloat16)),     # 6 B: the next fp32 starts misaligned
            ("bias", torch.randn(5, generator=g)),                        # 20 B
            ("ids", torch.arange(7, dtype=torch.int64)),                  # 56 B
            ("head", torch.randn(16, 16, generator=g).to(torch.bfloat16))]  # 512 B


def test_bucket_offsets_align_every_bucket_start():
    plan = [[ParamMeta("a", "uint8", (12,))], [ParamMeta("b", "float32", (25,))], [ParamMeta("c", "uint8", (1,))]]
    # 12 B at 0; 100 B at 64 (next multiple of 64); 1 B at 192 (164 rounded up); file 193 B
    assert bucket_offsets(plan) == ([0, 64, 192], 193)


def test_round_trip_is_exact_and_the_file_is_private_then_removed(dirs):
    tensors = _tensors()
    staged = write_version(tensors, "actor-0/v3", bucket_bytes=1285)   # embed alone, then the small ones
    try:
        assert os.path.dirname(staged.path) == str(dirs[0])
        # boot id, pid and start ticks: an identity no reused pid nor other boot shares
        assert os.path.basename(staged.path).startswith(f"lagrl-weights-{staging.identity()}-actor-0_v3-")
        assert staging.identity().startswith(staging.boot_id()[:8] + f"-{os.getpid()}.")
        assert stat.S_IMODE(os.stat(staged.path).st_mode) == 0o600
        assert [[m[0] for m in b] for b in staged.plan] == [["embed"], ["norm", "bias", "ids", "head"]]
        assert staged.offsets == [0, 1280] and staged.nbytes == 1280 + 6 + 20 + 56 + 512
        info = staged.update_info(3)
        assert info["version"] == 3 and info["path"] == staged.path
        got = [pair for named in read_buckets(info["path"], info["nbytes"], info["plan"], info["offsets"])
               for pair in named]
        assert [n for n, _ in got] == [n for n, _ in tensors]
        for (_, want), (_, have) in zip(tensors, got):
            assert have.dtype == want.dtype and have.shape == want.shape and torch.equal(have, want)
        assert sweep() == [] and os.path.exists(staged.path)       # this live writer holds it
    finally:
        staged.remove()
    assert not os.path.exists(staged.path)


def test_a_failed_write_leaves_no_file(dirs):
    bad = [("ok", torch.ones(4)), ("meta", torch.empty(4, device="meta"))]   # cannot be written out
    with pytest.raises(Exception):
        write_version(bad, "x")
    assert list(dirs[0].iterdir()) == []


def test_a_killed_writers_file_is_removed_when_the_next_actor_starts(dirs):
    writer = _writer(dirs[0], "stage")
    try:
        path = Path(_line(writer)["path"])
        _actor_start()                       # another actor starts: the live writer's file stays
        assert path.exists()
    finally:
        _kill(writer)                        # killed between staging and removing
    assert path.exists()                     # its copy is left behind...
    _actor_start()
    assert not path.exists()                 # ...until the next actor start sweeps it


def test_a_live_writers_file_is_never_swept_whatever_its_name_says(dirs):
    writer = _writer(dirs[0], "stage")
    try:
        path = Path(_line(writer)["path"])
        # its name now claims another boot's process (as another pid namespace's pid would mislead a
        # pid check): the writer's flock, which follows the file, is what counts
        renamed = path.with_name(f"{staging.PREFIX}00000000-1.1-renamed-v1-00000000")
        path.rename(renamed)
        assert sweep() == [] and renamed.exists()
    finally:
        _kill(writer)
    assert sweep() == [renamed.name] and not renamed.exists()


def test_a_child_forked_by_the_writer_does_not_keep_its_file(dirs):
    writer = _writer(dirs[0], "fork")
    report = _line(writer)
    try:
        _kill(writer)
        assert Path(report["path"]).exists() and sweep() == [Path(report["path"]).name]
    finally:
        os.kill(report["child"], signal.SIGKILL)


def test_files_of_another_boot_and_of_dead_writers_are_swept_in_both_directories(dirs):
    shm = dirs[0]
    private = staging.private_dir()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    other_boot = shm / f"{staging.PREFIX}deadbeef-{os.getpid()}.1-a-v1-00000000"   # a pid alive here: irrelevant
    dead_here = private / f"{staging.PREFIX}{staging.boot_id()[:8]}-{dead}.9-a-v2-00000000"
    old_format = shm / f"{staging.PREFIX}{dead}-a-v3-0000"                         # the earlier naming
    kept = [shm / "other-file", shm / staging.LOCK_NAME, shm / f"{staging.PREFIX}escape-0123"]   # not a staged name
    for path in (other_boot, dead_here, old_format, *kept):
        path.write_bytes(b"x")
    assert sorted(sweep()) == sorted(p.name for p in (other_boot, dead_here, old_format))
    assert sorted(shm.iterdir()) == sorted(kept) and list(private.iterdir()) == []


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a file to another user")
def test_another_users_file_is_never_removed(dirs):
    foreign = dirs[0] / f"{staging.PREFIX}deadbeef-1.1-a-v1-00000000"
    foreign.write_bytes(b"x")
    os.chown(foreign, 65534, 65534)          # nobody's: root could open and remove it, and must not
    assert sweep() == [] and foreign.exists()


def test_the_node_lock_serialises_two_writers(dirs):
    first, second = _writer(dirs[0], "locked"), None
    try:
        assert _line(first)["event"] == "waiting"
        staged_first = _line(first)
        assert staged_first["staged_now"] == [Path(staged_first["path"]).name]
        second = _writer(dirs[0], "locked")
        assert _line(second)["event"] == "waiting"
        assert select.select([second.stdout], [], [], 1.0)[0] == []   # blocked while the first holds its copy
        first.stdin.write("\n")
        removed_first = _line(first)
        staged_second = _line(second)
        assert staged_second["t"] >= removed_first["t"]
        assert staged_second["staged_now"] == [Path(staged_second["path"]).name]     # one copy at a time
        second.stdin.write("\n")
        assert _line(second)["event"] == "removed"
        assert first.wait(30) == 0 and second.wait(30) == 0
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                _kill(proc)


def test_a_node_lock_held_too_long_times_out_with_heartbeats(dirs):
    beats = []
    with node_lock():
        waiter = threading.Thread(target=lambda: beats.append(_try_lock(1.3, lambda: beats.append("beat"))))
        waiter.start()
        waiter.join()
    assert beats[0] == "beat" and isinstance(beats[-1], TimeoutError) and staging.LOCK_NAME in str(beats[-1])
    with node_lock(timeout_s=0.1) as waited:             # free again
        assert waited < 0.1


def _try_lock(timeout_s, on_wait):
    try:
        with node_lock(timeout_s=timeout_s, on_wait=on_wait):
            return None
    except TimeoutError as exc:
        return exc


def _memory(monkeypatch, available: int) -> None:
    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=available))


def test_low_available_memory_stages_on_disk_not_in_ram(dirs, monkeypatch):
    shm, tmp = dirs
    private = tmp / f"lagrl-staging-{os.getuid()}"
    monkeypatch.setattr(staging, "in_memory", lambda directory: False)
    _memory(monkeypatch, 8 << 30)
    assert staging_dir(1 << 20) == shm
    _memory(monkeypatch, staging.MEMORY_HEADROOM + 1000)   # /dev/shm has room; memory not for a 1 MiB or 2 kB version
    assert staging_dir(1 << 20) == private and stat.S_IMODE(private.stat().st_mode) == 0o700
    staged = write_version(_tensors(), "low-memory")
    try:
        assert Path(staged.path).parent == private
    finally:
        staged.remove()


def test_no_room_anywhere_is_a_clear_error_naming_the_sizes(dirs, monkeypatch):
    _memory(monkeypatch, 100 << 20)
    monkeypatch.setattr(staging, "in_memory", lambda directory: True)     # the temporary directory is RAM too
    with pytest.raises(NoRoomToStage, match=r"no room to stage a 1024 MiB weight version: .* available memory is "
                                            r"100 MiB .* has \d+ MiB free"):
        staging_dir(1 << 30)
    _memory(monkeypatch, 64 << 30)
    monkeypatch.setattr(staging, "free_bytes", lambda directory: 10 << 20)    # no disk room either
    with pytest.raises(NoRoomToStage, match="has 10 MiB free"):
        staging_dir(1 << 30)


def test_without_shm_a_private_directory_is_used(dirs, monkeypatch):
    monkeypatch.setattr(staging, "SHM", dirs[0] / "no-such-dir")
    where = staging_dir(1 << 20)
    assert where == dirs[1] / f"lagrl-staging-{os.getuid()}" and stat.S_IMODE(where.stat().st_mode) == 0o700
