"""The collective transport's data plane: bucket plans, packing, and one broadcast group per generation.

A *generation* is one membership of the group (learner rank 0 plus the engine workers of the
current members). Each generation builds its group on ``PrefixStore("g<gen>", hub)``, so a
re-formed group never collides with a member still stuck in an old one, and no new port is
needed. Both backends are built the same way and used through the same two methods
(``broadcast``, ``close``):

- gloo (CPU): vLLM's ``init_gloo_process_group``; every wait is bounded by gloo's own timeout.
- NCCL (CUDA): vLLM's ``PyNcclCommunicator`` over a ``StatelessProcessGroup`` on the same
  store. PyNccl has no timeouts, and a dead peer does not fail the others' kernels, so each
  broadcast records a CUDA event that is polled until ``timeout_s``, running a ``tick`` every
  ``TICK_S`` meanwhile (the learner checks its members' heartbeats, an engine beats and checks
  whether the learner aborted the send); on expiry or a raising tick the communicator is aborted.
  Its construction (``ncclCommInitRank`` and a warm-up all-reduce, both blocking) runs in a
  thread with the same deadline.

Bucket plans cut *before* a bucket would exceed the budget, so the extra memory of a version
is max(bucket, largest tensor) on a receiver (two while one loads and the next arrives), whatever
the model size. Inside a bucket a large tensor is broadcast straight from its own memory and
small ones are packed (vLLM's ``pack_tensors`` layout), so the sender copies almost nothing;
the receiver gets the bucket as one packed buffer either way.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
import time
from typing import Callable, Protocol

import torch
import torch.distributed as dist

from actors.transport import NamedTensors, ParamMeta

Plan = list[list[ParamMeta]]
TICK_S = 0.5          # how often a waiting NCCL broadcast runs its tick (heartbeat, abort checks)
SOLO_BYTES = 1 << 20  # a tensor this large is broadcast on its own, from its own memory


# ---- plans ---------------------------------------------------------------------------------------
def plan_buckets(meta: list[ParamMeta], bucket_bytes: int) -> Plan:
    """Consecutive parameters grouped so no bucket exceeds ``bucket_bytes`` unless one tensor does."""
    buckets, current, size = [], [], 0
    for m in meta:
        if current and size + m.nbytes > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(m)
        size += m.nbytes
    if current:
        buckets.append(current)
    return buckets


def plan_to_json(plan: Plan) -> list:
    return [[[m.name, m.dtype, list(m.shape)] for m in bucket] for bucket in plan]


def plan_from_json(raw: list) -> Plan:
    return [[ParamMeta(n, d, tuple(s)) for n, d, s in bucket] for bucket in raw]


def plan_id(plan: Plan) -> str:
    """Content hash: the hub stores a plan once, not once per version."""
    return hashlib.sha1(json.dumps(plan_to_json(plan)).encode()).hexdigest()[:16]


# ---- packing -------------------------------------------------------------------------------------
def pack(tensors: NamedTensors) -> torch.Tensor:
    """One contiguous uint8 buffer (vLLM's packed layout). A single contiguous tensor is sent
    as a view of itself: no copy."""
    if len(tensors) == 1 and tensors[0][1].is_contiguous():
        return tensors[0][1].reshape(-1).view(torch.uint8)
    from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

    chunk = pack_tensors(iter(tensors), lambda item: item[1], buffer_size_bytes=1 << 62)
    return chunk.packed_tensor


def unpack(buf: torch.Tensor, bucket: list[ParamMeta]) -> NamedTensors:
    """Views of ``buf`` named and shaped by the plan (the layout of vLLM's ``unpack_tensor``, which
    fails on a tensor whose byte offset is not a multiple of its element size, e.g. an fp32 tensor
    after an odd number of bf16 values: such a tensor is copied out instead)."""
    out, offset = [], 0
    for m in bucket:
        dtype = getattr(torch, m.dtype)
        raw = buf[offset:offset + m.nbytes]
        if offset % dtype.itemsize:
            raw = raw.clone()
        out.append((m.name, raw.view(dtype).view(m.shape)))
        offset += m.nbytes
    return out


def bucket_nbytes(bucket: list[ParamMeta]) -> int:
    return sum(m.nbytes for m in bucket)


def segments(bucket: list[ParamMeta]) -> list[tuple[int, int]]:
    """Index ranges [a, b) of a bucket that go in one broadcast each: a tensor of ``SOLO_BYTES`` or
    more alone (sent straight from its own memory: no pack copy), runs of smaller ones packed.
    Both sides derive them from the plan, and the bytes land where ``unpack`` expects them."""
    out, start = [], 0
    for i, m in enumerate(bucket):
        if m.nbytes >= SOLO_BYTES:
            if start < i:
                out.append((start, i))
            out.append((i, i + 1))
            start = i + 1
    if start < len(bucket):
        out.append((start, len(bucket)))
    return out


def send_bucket(channel: Channel, bucket: list[ParamMeta], tensors: NamedTensors,
                tick: Callable[[], None] | None = None) -> int:
    """Rank 0: every segment of one bucket, all in flight at once; returns when all are sent (the
    tensors may be released then: under ZeRO-3 they are gathered only for this bucket)."""
    pending, sent = [], 0
    for a, b in segments(bucket):
        buf = pack(tensors[a:b]).to(channel.device)
        pending.append((channel.start(buf), buf))
        sent += buf.numel()
    for p, _ in pending:
        p.wait(tick)
    return sent


def post_bucket(channel: Channel, bucket: list[ParamMeta]) -> tuple[torch.Tensor, list[Pending]]:
    """A receiver: a fresh buffer for one bucket with every segment's receive posted into it."""
    buf = torch.empty(bucket_nbytes(bucket), dtype=torch.uint8, device=channel.device)
    pending, offset = [], 0
    for a, b in segments(bucket):
        size = bucket_nbytes(bucket[a:b])
        pending.append(channel.start(buf[offset:offset + size]))
        offset += size
    return buf, pending


# ---- channels ------------------------------------------------------------------------------------
class Pending(Protocol):
    def wait(self, tick: Callable[[], None] | None = None) -> None:
        """Until the broadcast completed here; raises on a failure or at the channel's timeout.
        ``tick()`` runs every ``TICK_S`` while NCCL waits (heartbeats, aborting early: it may raise);
        gloo needs none (a dead peer fails it at once)."""


class Channel(Protocol):
    gen: int
    device: torch.device

    def start(self, t: torch.Tensor) -> Pending:
        """Begin broadcasting ``t`` (rank 0 sends, the others receive into it); ``t`` must stay
        untouched until ``wait()``. One broadcast in flight lets the next bucket be packed (or the
        last one loaded) meanwhile."""

    def broadcast(self, t: torch.Tensor) -> None:
        """``start(t).wait()``: bounded by the timeout."""

    def close(self) -> None:
        """Leave the group (never blocks for long, also after a peer died)."""


class GlooChannel:
    """A gloo group of one generation (CPU tensors)."""

    def __init__(self, store, gen: int, rank: int, world: int, timeout_s: float):
        from vllm.distributed.utils import init_gloo_process_group

        self.gen, self.rank, self.world, self.device = gen, rank, world, torch.device("cpu")
        self.timeout = dt.timedelta(seconds=timeout_s)
        self.pg = init_gloo_process_group(dist.PrefixStore(f"g{gen}", store), rank, world, self.timeout)

    def start(self, t: torch.Tensor) -> Pending:
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.timeout = 0, self.timeout
        return _GlooPending(self.pg.broadcast([t], opts))

    def broadcast(self, t: torch.Tensor) -> None:
        self.start(t).wait()

    def close(self) -> None:
        # Dropping the last reference closes the connections, so peers blocked in a broadcast of
        # this group fail at once (measured: 0.2 s); shutdown()/abort() alone leave them waiting
        # for their timeout.
        self.pg = None


def _within(fn, timeout_s: float, what: str):
    """``fn()`` in a daemon thread; TimeoutError after ``timeout_s`` (the thread is left behind)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:       # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name=f"lagrl-{what}")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what}: no answer within {timeout_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class NcclChannel:
    """An NCCL communicator of one generation (CUDA tensors), with polled deadlines."""

    def __init__(self, store, gen: int, rank: int, world: int, timeout_s: float, device: torch.device):
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        self.gen, self.rank, self.world, self.device = gen, rank, world, torch.device(device)
        self.timeout_s = timeout_s
        group = StatelessProcessGroup(rank=rank, world_size=world, store=dist.PrefixStore(f"g{gen}", store))
        self.comm = _within(lambda: PyNcclCommunicator(group, device=self.device), timeout_s,
                            f"nccl group {gen} init (rank {rank} of {world})")

    def start(self, t: torch.Tensor) -> Pending:
        stream = torch.cuda.current_stream(self.device)
        self.comm.broadcast(t, src=0, stream=stream)
        done = torch.cuda.Event()
        done.record(stream)
        return _NcclPending(self, done)

    def broadcast(self, t: torch.Tensor) -> None:
        self.start(t).wait()

    def close(self) -> None:
        comm, self.comm = getattr(self, "comm", None), None
        if comm is None:
            return
        if hasattr(comm, "destroy"):            # vLLM 0.32: ncclCommAbort in a daemon thread
            comm.destroy()
        elif getattr(comm, "available", False) and not getattr(comm, "disabled", True):   # vLLM 0.26
            _within(lambda: comm.nccl.ncclCommAbort(comm.comm), 5.0, "nccl abort")


class _GlooPending:
    def __init__(self, work):
        self.work = work

    def wait(self, tick: Callable[[], None] | None = None) -> None:
        """Raises at the group's timeout, or at once when a peer dies. The error raised holds no
        reference to gloo's Work (which keeps the group's connections open): closing the channel
        must end the group now, so the other members fail at once too."""
        work, self.work = self.work, None
        try:
            work.wait()
            return
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
        del work
        raise RuntimeError(message)


class _NcclPending:
    def __init__(self, channel: NcclChannel, done):
        self.channel, self.done = channel, done

    def wait(self, tick: Callable[[], None] | None = None) -> None:
        now = time.monotonic()
        deadline, next_tick = now + self.channel.timeout_s, now + TICK_S
        while not self.done.query():
            now = time.monotonic()
            if now > deadline:
                self.channel.close()
                raise TimeoutError(f"nccl broadcast in group {self.channel.gen} did not complete within "
                                   f"{self.channel.timeout_s:.0f} s (communicator aborted)")
            if tick is not None and now >= next_tick:
                next_tick = now + TICK_S
                try:
                    tick()
                except BaseException:
                    self.channel.close()  # NCCL kernels of a dead group never finish on their own
                    raise
            time.sleep(0.0005)


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """``auto``: NCCL when the tensors live on CUDA, gloo otherwise."""
    if backend != "auto":
        return backend
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def open_channel(backend: str, store, gen: int, rank: int, world: int, timeout_s: float,
                 device: torch.device | str) -> Channel:
    """The group of generation ``gen`` on the hub's store, as rank ``rank`` of ``world``."""
    if backend == "gloo":
        return GlooChannel(store, gen, rank, world, timeout_s)
    if backend == "nccl":
        if torch.device(device).type != "cuda":
            raise ValueError(f"weight transport backend 'nccl' needs CUDA tensors, this member is on {device}")
        return NcclChannel(store, gen, rank, world, timeout_s, torch.device(device))
    raise ValueError(f"unknown collective backend {backend!r} (gloo or nccl)")
