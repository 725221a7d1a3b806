"""The object store's hand-over file (actors.transport.shm): layout, exact round trip, no leaked files.

No vLLM engine: the worker's half (``read_buckets``) is what ``LagrlShmEngine`` feeds to
``model.load_weights``, read here directly.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import torch

from actors.transport import ParamMeta
from actors.transport import shm
from actors.transport.shm import bucket_offsets, read_buckets, remove_stale, staging_dir, write_version


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


def test_round_trip_is_exact_and_the_file_is_private_then_removed():
    tensors = _tensors()
    staged = write_version(tensors, "actor-0/v3", bucket_bytes=1285)   # embed alone, then the small ones
    try:
        assert os.path.dirname(staged.path) == str(staging_dir(staged.nbytes))
        assert os.path.basename(staged.path).startswith(f"lagrl-weights-{os.getpid()}-actor-0_v3-")
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
    finally:
        staged.remove()
    assert not os.path.exists(staged.path)


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "SHM", tmp_path)
    bad = [("ok", torch.ones(4)), ("meta", torch.empty(4, device="meta"))]   # cannot be written out
    with pytest.raises(Exception):
        write_version(bad, "x")
    assert list(tmp_path.iterdir()) == []


def test_files_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / f"lagrl-weights-{pid}-a-v1-0000").write_bytes(b"x")
    (tmp_path / f"lagrl-weights-{os.getpid()}-a-v2-0000").write_bytes(b"x")     # this live process's
    (tmp_path / "other-file").write_bytes(b"x")
    assert remove_stale(tmp_path) == [f"lagrl-weights-{pid}-a-v1-0000"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"lagrl-weights-{os.getpid()}-a-v2-0000", "other-file"]


def test_too_small_shm_falls_back_to_a_private_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "SHM", tmp_path / "no-such-dir")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)      # re-read TMPDIR
    where = staging_dir(1 << 20)
    assert where == tmp_path / f"lagrl-staging-{os.getuid()}" and stat.S_IMODE(where.stat().st_mode) == 0o700
