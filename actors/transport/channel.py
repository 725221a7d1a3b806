"""The collective transport's data plane: bucket plans, packing, and one broadcast group per generation.

A *generation* is one membership of the group (learner rank 0 plus the engine workers of the
current members). Each generation builds its group on ``PrefixStore("g<gen>", hub)``, so a
re-formed group never collides with a member still stuck in an old one, and no new port is
needed. Both backends are built the same way and used through the same two methods
(``broadcast``, ``close``):

- gloo (CPU): vLLM's ``init_gloo_process_group``; every wait is bounded by gloo's own timeout,
  and a peer that dies in a broadcast fails it at once.
- NCCL (CUDA): vLLM's ``PyNcclCommunicator`` over a ``StatelessProcessGroup`` on the same
  store. PyNccl has no timeouts, and a dead peer does not fail the others' kernels, so each
  broadcast records a CUDA event that is polled until ``timeout_s``; on expiry the communicator
  is aborted. Broadcasts run on the channel's own CUDA stream (after the work already queued on
  the caller's), so a receive overlaps the loading of the bucket before it.

Every wait takes a ``tick`` that runs every ``TICK_S`` while it waits and may raise to end it (the
learner checks its members' heartbeats, an engine beats and checks whether the learner aborted
the send): the group's set-up starts with a rendezvous on the store polled that way (a peer that
died after "go" never arrives, and gloo's or NCCL's own rendezvous would wait for it until
``timeout_s``), and so do the header and every bucket. NCCL's construction then runs in a thread
with the same deadline and tick; one given up on is left behind until its own timeout, so it gets
a store connection of its own (a blocked store wait holds the connection it runs on).

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


class ReceiveBuffers:
    """A receiver's bucket buffers in host memory, reused across buckets and versions.

    A fresh 64 MB host buffer is page-faulted in by the receive that fills it: writes into fresh
    buffers ran at about 1 GB/s on the 2-core machine, into a reused one at 5-7 GB/s, and that
    difference was most of the collective's cost over the raw broadcast (bench/weight_sync.py). A
    buffer is handed out again only once nothing else refers to its memory: vLLM's layerwise reload
    keeps views of a bucket until its layer is complete. At most ``keep`` buffers are kept (the
    memory a receiver holds between versions); CUDA buffers come from torch's caching allocator and
    are not pooled here."""

    def __init__(self, keep: int = 3):
        self.keep = keep
        self._pool: list[tuple[torch.Tensor, int]] = []        # (buffer, its storage's use count when idle)

    def take(self, nbytes: int, device: torch.device, capacity: int = 0) -> torch.Tensor:
        """``nbytes`` of uint8 on ``device``; from the pool on the CPU (capacity: the size to allocate)."""
        if device.type != "cpu" or _use_count is None:
            return torch.empty(nbytes, dtype=torch.uint8, device=device)
        for buf, idle in self._pool:
            if buf.numel() >= nbytes and _use_count(buf) == idle:
                return buf[:nbytes]
        buf = torch.empty(max(nbytes, capacity), dtype=torch.uint8)
        if len(self._pool) < self.keep:
            self._pool.append((buf, _use_count(buf)))
        return buf[:nbytes]


def _storage_use_count() -> Callable[[torch.Tensor], int] | None:
    """How many tensors share ``t``'s memory (torch's private counter; None where this torch lacks it:
    then nothing is pooled)."""
    counter = getattr(torch._C, "_storage_Use_Count", None)
    if counter is None:
        return None
    return lambda t: counter(t.untyped_storage()._cdata)


_use_count = _storage_use_count()


def post_bucket(channel: Channel, bucket: list[ParamMeta], buffers: ReceiveBuffers | None = None,
                capacity: int = 0) -> tuple[torch.Tensor, list[Pending]]:
    """A receiver: a buffer for one bucket (from ``buffers`` when given) with every segment's receive
    posted into it."""
    nbytes = bucket_nbytes(bucket)
    buf = (buffers.take(nbytes, channel.device, capacity) if buffers is not None
           else torch.empty(nbytes, dtype=torch.uint8, device=channel.device))
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
        ``tick()`` runs every ``TICK_S`` while it waits (heartbeats, aborting early: it may raise)."""


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

    def __init__(self, store, gen: int, rank: int, world: int, timeout_s: float,
                 tick: Callable[[], None] | None = None):
        from vllm.distributed.utils import init_gloo_process_group

        self.gen, self.rank, self.world, self.device = gen, rank, world, torch.device("cpu")
        self.timeout = dt.timedelta(seconds=timeout_s)
        prefixed = dist.PrefixStore(f"g{gen}", store)
        _rendezvous(prefixed, rank, world, timeout_s, f"gloo group {gen} set-up (rank {rank} of {world})", tick)
        self.pg = init_gloo_process_group(prefixed, rank, world, self.timeout)

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


def _rendezvous(store, rank: int, world: int, timeout_s: float, what: str,
                tick: Callable[[], None] | None = None) -> None:
    """Until every rank of the group said it is here, running ``tick`` every ``TICK_S`` (it may raise).
    Before a group's own rendezvous, which waits for a missing peer until its timeout and cannot
    be interrupted; a peer that dies between saying so and joining is left to that timeout."""
    store.set(f"lagrl/here/{rank}", "1")
    keys = [f"lagrl/here/{r}" for r in range(world)]
    now = time.monotonic()
    deadline, next_tick, pause = now + timeout_s, now + TICK_S, 0.001
    while not store.check(keys):
        now = time.monotonic()
        if now > deadline:
            missing = [r for r in range(world) if not store.check([f"lagrl/here/{r}"])]
            raise TimeoutError(f"{what}: ranks {missing} did not arrive within {timeout_s:.0f} s")
        if tick is not None and now >= next_tick:
            next_tick = now + TICK_S
            tick()
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _within(fn, timeout_s: float, what: str, tick: Callable[[], None] | None = None):
    """``fn()`` in a daemon thread; TimeoutError after ``timeout_s``, ``tick()`` every ``TICK_S``
    meanwhile (it may raise); either way the thread is left behind."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:       # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name=f"lagrl-{what}")
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what}: no answer within {timeout_s:.0f} s")
        thread.join(min(TICK_S, left))
        if thread.is_alive() and tick is not None:
            tick()
    if "error" in box:
        raise box["error"]
    return box["value"]


class NcclChannel:
    """An NCCL communicator of one generation (CUDA tensors), with polled deadlines."""

    def __init__(self, store, gen: int, rank: int, world: int, timeout_s: float, device: torch.device,
                 tick: Callable[[], None] | None = None):
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        self.gen, self.rank, self.world, self.device = gen, rank, world, torch.device(device)
        self.timeout_s = timeout_s
        prefixed = dist.PrefixStore(f"g{gen}", store)
        _rendezvous(prefixed, rank, world, timeout_s, f"nccl group {gen} set-up (rank {rank} of {world})", tick)
        group = StatelessProcessGroup(rank=rank, world_size=world, store=prefixed)
        self.comm = _within(lambda: PyNcclCommunicator(group, device=self.device), timeout_s,
                            f"nccl group {gen} init (rank {rank} of {world})", tick)
        self.stream = torch.cuda.Stream(device=self.device)

    def start(self, t: torch.Tensor) -> Pending:
        caller = torch.cuda.current_stream(self.device)
        # t's memory may still be read or written by work queued on the caller's stream (the sender's
        # pack, a freed block's last user): the broadcast starts after it
        self.stream.wait_stream(caller)
        self.comm.broadcast(t, src=0, stream=self.stream)
        t.record_stream(self.stream)        # the allocator keeps t's memory until the broadcast is done
        done = torch.cuda.Event()
        done.record(self.stream)
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
        """Raises at the group's timeout, at once when a peer dies, or when ``tick`` raises. The error
        raised holds no reference to gloo's Work (which keeps the group's connections open): closing
        the channel must end the group now, so the other members fail at once too."""
        work, self.work = self.work, None
        try:
            if tick is not None:
                next_tick, pause = time.monotonic() + TICK_S, 0.0002
                while not work.is_completed():
                    if time.monotonic() >= next_tick:
                        next_tick = time.monotonic() + TICK_S
                        tick()
                    time.sleep(pause)
                    pause = min(pause * 2, 0.002)
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
        torch.cuda.current_stream(self.channel.device).wait_event(self.done)   # the caller reads it next


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """``auto``: NCCL when the tensors live on CUDA, gloo otherwise."""
    if backend != "auto":
        return backend
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def open_channel(backend: str, store, gen: int, rank: int, world: int, timeout_s: float,
                 device: torch.device | str, tick: Callable[[], None] | None = None) -> Channel:
    """The group of generation ``gen`` on the hub's store, as rank ``rank`` of ``world``. ``store``:
    a connection of its own (module docstring); ``tick`` runs while the set-up waits."""
    if backend == "gloo":
        return GlooChannel(store, gen, rank, world, timeout_s, tick)
    if backend == "nccl":
        if torch.device(device).type != "cuda":
            raise ValueError(f"weight transport backend 'nccl' needs CUDA tensors, this member is on {device}")
        return NcclChannel(store, gen, rank, world, timeout_s, torch.device(device), tick)
    raise ValueError(f"unknown collective backend {backend!r} (gloo or nccl)")
