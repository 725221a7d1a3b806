"""One weight version as one file in shared memory: how the object store's tensors reach a vLLM engine.

vLLM's IPC does not carry tensors as ``collective_rpc`` arguments (an out-of-process worker gets
``[dtype, shape, index]`` lists), so the actor does not send them at all:

    actor:   staged = write_version(tensors, tag)          # one file on tmpfs, the buckets' layout
             llm.update_weights({"update_info": staged.update_info(version)})    # JSON-able only
    worker:  for named in read_buckets(**info): model.load_weights(named)        # views of the file
    actor:   staged.remove()                               # also when the load failed

The layout is the collective transport's (``channel.plan_buckets``, ``segments``, ``pack``, and
``unpack`` on the worker), every bucket starting ``ALIGN``-byte aligned. A worker maps the file
copy-on-write (``torch.from_file(shared=False)``): the bytes are read from the page cache, no
copy until a parameter takes them. In-process and out-of-process engines load the same way, and
every tensor-parallel worker maps the same file.

Where: ``/dev/shm`` when it is writable and has room for the version, else a private directory
under the system's temporary directory (a container's 64 MiB ``/dev/shm`` is common). A file
whose writer died before removing it (its pid is in the name) is removed by the next writer on
the node (:func:`remove_stale`).
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from actors.transport import NamedTensors, TensorListSource
from actors.transport.channel import (
    Plan,
    bucket_nbytes,
    pack,
    plan_buckets,
    plan_from_json,
    plan_to_json,
    segments,
    unpack,
)

ALIGN = 64                    # each bucket's first byte: any dtype's view of it is aligned
BUCKET_BYTES = 64 << 20       # the writer packs one bucket at a time (small tensors are copied once more)
SHM = Path("/dev/shm")
PREFIX = "lagrl-weights-"
HEADROOM = 64 << 20           # /dev/shm keeps this much free beside the version


@dataclass
class StagedVersion:
    """A version written to ``path``: what a worker needs to read it (all JSON-able)."""

    path: str
    nbytes: int
    plan: list                # channel.plan_to_json form
    offsets: list[int]        # each bucket's first byte

    def update_info(self, version: int) -> dict:
        return {"version": version, "path": self.path, "nbytes": self.nbytes, "plan": self.plan,
                "offsets": self.offsets}

    def remove(self) -> None:
        Path(self.path).unlink(missing_ok=True)


def bucket_offsets(plan: Plan) -> tuple[list[int], int]:
    """Each bucket's first byte (``ALIGN``-aligned) and the file's size."""
    offsets, end = [], 0
    for bucket in plan:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + bucket_nbytes(bucket)
    return offsets, end


def staging_dir(nbytes: int) -> Path:
    """``/dev/shm`` when writable with room for ``nbytes`` (plus headroom), else a private directory."""
    if SHM.is_dir() and os.access(SHM, os.W_OK):
        stat = os.statvfs(SHM)
        if stat.f_bavail * stat.f_frsize >= nbytes + HEADROOM:
            return SHM
    private = Path(tempfile.gettempdir()) / f"lagrl-staging-{os.getuid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    if private.stat().st_uid != os.getuid():
        raise PermissionError(f"{private} belongs to another user: set TMPDIR to a directory of your own")
    return private


def write_version(tensors: NamedTensors, tag: str, bucket_bytes: int = BUCKET_BYTES) -> StagedVersion:
    """``tensors`` (CPU) into a new file; on any failure the file is removed."""
    source = TensorListSource(tensors)
    plan = plan_buckets(source.metadata(), bucket_bytes)
    offsets, nbytes = bucket_offsets(plan)
    directory = staging_dir(nbytes)
    remove_stale(directory)
    safe_tag = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)
    path = directory / f"{PREFIX}{os.getpid()}-{safe_tag}-{uuid.uuid4().hex[:8]}"
    staged = StagedVersion(str(path), nbytes, plan_to_json(plan), offsets)
    try:
        with open(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), "wb") as f:
            f.truncate(nbytes)
            for bucket, offset, named in zip(plan, offsets, source.buckets(plan)):
                f.seek(offset)
                for a, b in segments(bucket):
                    f.write(memoryview(pack(named[a:b]).numpy()))
    except BaseException:
        staged.remove()
        raise
    return staged


def read_buckets(path: str, nbytes: int, plan: list, offsets: list[int]) -> Iterator[NamedTensors]:
    """The version at ``path`` bucket by bucket: named views of a copy-on-write mapping of the file
    (the mapping lives as long as any view of it)."""
    buf = torch.from_file(path, shared=False, size=nbytes, dtype=torch.uint8)   # (nbytes,) uint8
    for bucket, offset in zip(plan_from_json(plan), offsets):
        yield unpack(buf[offset:offset + bucket_nbytes(bucket)], bucket)


def remove_stale(directory: Path) -> list[str]:
    """Remove the files in ``directory`` whose writer process is gone; their names."""
    import psutil

    removed = []
    for path in directory.glob(f"{PREFIX}*"):
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            try:
                path.unlink(missing_ok=True)
            except PermissionError:          # another user's, in the shared /dev/shm
                continue
            removed.append(path.name)
    return removed
