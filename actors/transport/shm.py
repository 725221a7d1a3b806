"""One weight version as one file in shared memory: how the object store's tensors reach a vLLM engine.

vLLM's IPC does not carry tensors as ``collective_rpc`` arguments (an out-of-process worker gets
``[dtype, shape, index]`` lists), so the actor does not send them at all:

    actor:   with staging.node_lock():                 # one staged copy per node at a time
                 staged = write_version(tensors, tag)      # one file on tmpfs, the buckets' layout
                 llm.update_weights({"update_info": staged.update_info(version)})   # JSON-able only
    worker:          for named in read_buckets(**info): model.load_weights(named)   # views of the file
    actor:       staged.remove()                           # also when the load failed

The layout is the collective transport's (``channel.plan_buckets``, ``segments``, ``pack``, and
``unpack`` on the worker), every bucket starting ``ALIGN``-byte aligned. A worker maps the file
copy-on-write (``torch.from_file(shared=False)``): the bytes are read from the page cache, no
copy until a parameter takes them. In-process and out-of-process engines load the same way, and
every tensor-parallel worker maps the same file.

Where, and for how long (``actors.transport.staging``): ``/dev/shm`` when it has room and available
memory leaves headroom for the version, else a private directory under the system's temporary
directory (a container's 64 MiB ``/dev/shm`` is common). The writer holds an flock on its file
until it removes it; every write (and every actor start and stop, and the run's end) sweeps both
directories of the files no live writer holds, so a writer killed between staging and removing
leaves its copy only until the next sweep. The object store transport holds the node's staging
lock around write -> load -> remove (``staging.node_lock``): one staged copy per node at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from actors.transport import NamedTensors, TensorListSource, staging
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


@dataclass
class StagedVersion:
    """A version written to ``path``: what a worker needs to read it (all JSON-able)."""

    path: str
    nbytes: int
    plan: list                # channel.plan_to_json form
    offsets: list[int]        # each bucket's first byte
    fd: int = field(default=-1, repr=False)   # the writer's hold on the file (staging.create_held)

    def update_info(self, version: int) -> dict:
        return {"version": version, "path": self.path, "nbytes": self.nbytes, "plan": self.plan,
                "offsets": self.offsets}

    def remove(self) -> None:
        """Unlink the file, then let go of it (a sweep never sees it unheld while it exists)."""
        Path(self.path).unlink(missing_ok=True)
        staging.release(self.fd)


def bucket_offsets(plan: Plan) -> tuple[list[int], int]:
    """Each bucket's first byte (``ALIGN``-aligned) and the file's size."""
    offsets, end = [], 0
    for bucket in plan:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + bucket_nbytes(bucket)
    return offsets, end


def write_version(tensors: NamedTensors, tag: str, bucket_bytes: int = BUCKET_BYTES) -> StagedVersion:
    """``tensors`` (CPU) into a new file; on any failure the file is removed."""
    source = TensorListSource(tensors)
    plan = plan_buckets(source.metadata(), bucket_bytes)
    offsets, nbytes = bucket_offsets(plan)
    staging.sweep()                  # before choosing: what dead writers left is memory again
    directory = staging.staging_dir(nbytes)
    path, fd = staging.create_held(directory, re.sub(r"[^A-Za-z0-9_.-]", "_", tag))
    staged = StagedVersion(str(path), nbytes, plan_to_json(plan), offsets, fd)
    try:
        with open(fd, "wb", closefd=False) as f:
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
