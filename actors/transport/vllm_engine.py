"""lagrl's backends for vLLM's weight-transfer API (``vllm.distributed.weight_transfer``): every
weight transport loads through one, whether the engine core runs in the actor's process or not.

- :data:`BACKEND` (``LagrlCollectiveEngine``): the collective transport's receiver;
- :data:`SHM_BACKEND` (``LagrlShmEngine``): the object store's; the actor stages the version in
  one shared-memory file (``actors.transport.shm``) and passes only its path and layout;
- :data:`IPC_BACKEND` (``LagrlIpcEngine``): CUDA IPC's (``actors.transport.cuda_ipc``); the learner's
  staging buffer on the shared GPU, opened once from its handle, each version loaded from views of it.

Both are registered through vLLM's ``WeightTransferEngineFactory`` when ``actors.worker_extension``
is imported, which vLLM does in every worker process before the model loads; each worker then
creates one engine from ``LLM(weight_transfer_config={"backend": ...})``. The actor drives it with
vLLM's own RL calls, whose arguments are plain JSON-able dicts (they cross vLLM's IPC intact):

    llm.init_weight_transfer_engine({"init_info": ...})   collective: join generation `gen`
    llm.start_weight_update()                            vLLM's layerwise reload starts
    llm.update_weights({"update_info": ...})             collective: header, then the buckets
                                                         (``channel.post_bucket``); shm: the file's buckets
    llm.finish_weight_update()                           layerwise reload finalized

Written against both vLLM 0.26 and 0.32: ``trainer_send_weights`` is a static stub (abstract
in 0.26, gone in 0.32); ``update_weights`` is overridden because the base class synchronizes
``torch.accelerator``, which raises on a CPU-only torch; ``shutdown_weight_transfer_engine``
(0.32 only) is never needed: a new generation closes the old group in ``init_transfer_engine``.
The learner side is lagrl's own (``actors.transport.sender``): vLLM's trainer-side engine
changed its signature between 0.26 and 0.32 and pushes RPCs into engines, where lagrl's
actors pull between engine steps.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import WeightTransferEngine, WeightTransferInitInfo, WeightTransferUpdateInfo

from actors.transport.channel import (
    Channel,
    ReceiveBuffers,
    bucket_nbytes,
    open_channel,
    plan_from_json,
    post_bucket,
    unpack,
)
from actors.transport.hub import Hub
from actors.transport.ipc_handles import open_handle

BACKEND = "lagrl_collective"
SHM_BACKEND = "lagrl_shm"
IPC_BACKEND = "lagrl_cuda_ipc"
# under vLLM's logger: one line per version in the engine's own log (actors.engine_logs), wherever it runs
log = logging.getLogger("vllm.lagrl.weights")


@dataclass
class CollectiveInitInfo(WeightTransferInitInfo):
    host: str
    port: int
    gen: int                 # the generation (membership) this engine joins
    rank_offset: int         # this actor's first rank; its workers add their engine rank
    world_size: int
    backend: str             # gloo | nccl
    timeout_s: float = 300.0
    actor: str = ""          # who beats into the hub while a wait runs (per engine rank)
    inc: str = ""
    seq: int = 0             # the send the group forms for: its abort stops the set-up


@dataclass
class CollectiveUpdateInfo(WeightTransferUpdateInfo):
    seq: int                 # the learner's send number (checked against the header)
    version: int
    gen: int
    plan: list = field(default_factory=list)     # plan_to_json form


@dataclass
class ShmInitInfo(WeightTransferInitInfo):
    """Nothing to set up: every update names its own file."""


@dataclass
class ShmUpdateInfo(WeightTransferUpdateInfo):
    version: int
    path: str                # a file actors.transport.shm.write_version wrote
    nbytes: int
    plan: list = field(default_factory=list)     # plan_to_json form
    offsets: list = field(default_factory=list)  # each bucket's first byte in the file


@dataclass
class IpcUpdateInfo(WeightTransferUpdateInfo):
    version: int
    handle: str              # actors.transport.cuda_ipc.handle_of the learner's staging buffer
    nbytes: int
    plan: list = field(default_factory=list)     # plan_to_json form
    offsets: list = field(default_factory=list)  # each bucket's first byte in the buffer


def header_tensor(seq: int, version: int, gen: int, n_buckets: int, device) -> torch.Tensor:
    """What rank 0 broadcasts before the buckets: both sides check they are on the same send."""
    return torch.tensor([seq, version, gen, n_buckets], dtype=torch.int64, device=device)


def refresh_packed_copies(model: torch.nn.Module) -> None:
    """vLLM 0.32 CPU: layers that keep their weight *and* a packed oneDNN copy of it (the tied
    lm_head / embedding) are not re-packed by a reload, so logits would still use the old
    weights. Re-run their own post-load processing. Layers whose weight was replaced by the
    packed copy (numel 0) were already re-processed by the reload."""
    for module in model.modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if hasattr(module, "cpu_linear") and method is not None and weight is not None and weight.numel():
            method.process_weights_after_loading(module)


class _LayerwiseReloadEngine(WeightTransferEngine):
    """What lagrl's engines share: checkpoint-format (HF-named) weights loaded through vLLM's
    layerwise reload, which re-applies the loaders (fused QKV / gate-up, tensor-parallel slicing,
    tied embeddings) and the post-load processing (CPU repacking)."""

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        try:
            self.receive_weights(self.parse_update_info(update_info))
        except BaseException:
            # Give layers that received nothing their kernel tensors back so no parameter stays on
            # meta. Layers loaded before the failure keep the new values: the model is mixed until
            # the next complete load, and the actor does not sample from it (transport.consistent).
            self.abandon()
            self.finish_weight_update()
            raise
        if self.device.type == "cuda":   # the base class syncs torch.accelerator, which a CPU-only torch lacks
            torch.cuda.synchronize(self.device)

    def abandon(self) -> None:
        """After a failed receive, before the reload is finalized."""

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)
        refresh_packed_copies(self.model)

    @staticmethod
    def trainer_send_weights(iterator, trainer_args) -> None:
        """Abstract in vLLM 0.26's base class (removed in 0.32): lagrl's learner sends itself."""
        raise NotImplementedError("the learner sends through lagrl's transports (actors.transport)")


class LagrlShmEngine(_LayerwiseReloadEngine):
    """One per vLLM worker: loads a version the actor staged in a shared-memory file
    (``actors.transport.shm``); only the file's path and layout cross vLLM's IPC."""

    init_info_cls = ShmInitInfo
    update_info_cls = ShmUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.stats: dict[str, Any] = {}

    def init_transfer_engine(self, init_info: ShmInitInfo) -> None:
        pass

    def receive_weights(self, info: ShmUpdateInfo) -> None:
        from actors.transport.shm import read_buckets

        t0, n = time.monotonic(), 0
        for named in read_buckets(info.path, info.nbytes, info.plan, info.offsets):
            self.model.load_weights(named)
            n += len(named)
        self.stats = {"version": info.version, "tensors": n, "bytes": info.nbytes, "load_s": time.monotonic() - t0}
        log.info("lagrl: loaded version %d from %s (%d tensors, %.1f MB) in %.3f s", info.version, info.path, n,
                 info.nbytes / 1e6, self.stats["load_s"])

    def shutdown(self) -> None:
        pass


class LagrlIpcEngine(_LayerwiseReloadEngine):
    """One per vLLM worker on the learner's GPU: loads each version from views of the learner's staging
    buffer, opened once from its CUDA IPC handle (``actors.transport.cuda_ipc``)."""

    init_info_cls = ShmInitInfo         # nothing to set up: the first update names the buffer
    update_info_cls = IpcUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.opened: tuple[str, torch.Tensor] | None = None      # (handle, the buffer) kept across versions
        self.stats: dict[str, Any] = {}

    def init_transfer_engine(self, init_info: ShmInitInfo) -> None:
        pass

    def receive_weights(self, info: IpcUpdateInfo) -> None:
        if self.opened is None or self.opened[0] != info.handle:
            self.opened = (info.handle, open_handle(info.handle, self.device.index or 0))
        buf = self.opened[1]
        t0, n = time.monotonic(), 0
        for bucket, offset in zip(plan_from_json(info.plan), info.offsets):
            named = unpack(buf[offset:offset + bucket_nbytes(bucket)], bucket)
            self.model.load_weights(named)
            n += len(named)
        self.stats = {"version": info.version, "tensors": n, "bytes": info.nbytes, "load_s": time.monotonic() - t0}
        log.info("lagrl: loaded version %d through CUDA IPC (%d tensors, %.1f MB) in %.3f s", info.version, n,
                 info.nbytes / 1e6, self.stats["load_s"])

    def shutdown(self) -> None:
        self.opened = None


class LagrlCollectiveEngine(_LayerwiseReloadEngine):
    """One per vLLM worker: receives the learner's bucketed broadcasts into the running model."""

    init_info_cls = CollectiveInitInfo
    update_info_cls = CollectiveUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.hub: Hub | None = None
        self.channel: Channel | None = None
        self.buffers = ReceiveBuffers()          # host receive buffers, reused across versions
        self.member = ("", "", 0)           # actor, incarnation, this worker's engine rank
        self.stats: dict[str, Any] = {}

    def init_transfer_engine(self, init_info: CollectiveInitInfo) -> None:
        self.shutdown()
        pc = self.parallel_config
        worker = pc.data_parallel_index * pc.world_size + pc.rank        # vLLM's NCCL formula
        if self.hub is None or (self.hub.host, self.hub.port) != (init_info.host, init_info.port):
            self.hub = Hub.connect(init_info.host, init_info.port, init_info.timeout_s)
        self.member = (init_info.actor, init_info.inc, worker)
        t0 = time.monotonic()
        # the group's rendezvous gets its own store connection: a blocked store wait holds the
        # connection, and the heartbeats and abort checks of the tick must not wait behind it
        store = Hub.connect(init_info.host, init_info.port, init_info.timeout_s).store
        self.channel = open_channel(init_info.backend, store, init_info.gen, init_info.rank_offset + worker,
                                    init_info.world_size, init_info.timeout_s, self.device,
                                    tick=self._tick(init_info.seq))
        self.stats["connect_s"] = time.monotonic() - t0

    def receive_weights(self, info: CollectiveUpdateInfo) -> None:
        channel = self.channel
        if channel is None or channel.gen != info.gen:
            raise RuntimeError(f"update for group {info.gen}, this engine is in group "
                               f"{channel.gen if channel else None}")
        plan = plan_from_json(info.plan)
        tick = self._tick(info.seq)
        header = header_tensor(0, 0, 0, 0, channel.device)
        channel.start(header).wait(tick)
        expected = [info.seq, info.version, info.gen, len(plan)]
        if header.tolist() != expected:
            raise RuntimeError(f"out of step with the learner: header {header.tolist()}, expected {expected}")
        t0, nbytes = time.monotonic(), 0
        # A buffer per bucket, reused once the layerwise reload holds no view of it (channel.ReceiveBuffers).
        # The next bucket is received while this one loads (two buckets of memory; on NCCL the receive
        # runs on the channel's own stream, so it overlaps the load's kernels).
        largest = max((bucket_nbytes(b) for b in plan), default=0)
        incoming = post_bucket(channel, plan[0], self.buffers, largest) if plan else None
        for k, bucket in enumerate(plan):
            buf, pending = incoming
            for p in pending:
                p.wait(tick)
            if k + 1 < len(plan):
                incoming = post_bucket(channel, plan[k + 1], self.buffers, largest)
            self.model.load_weights(unpack(buf, bucket))
            nbytes += buf.numel()
        self.stats.update(receive_s=time.monotonic() - t0, bytes=nbytes, buckets=len(plan), version=info.version)
        log.info("lagrl: loaded version %d from group %d (%d buckets, %.1f MB) in %.3f s", info.version, info.gen,
                 len(plan), nbytes / 1e6, self.stats["receive_s"])

    def _tick(self, seq: int):
        """While a wait runs (group set-up, header, buckets): this worker's heartbeat for the learner
        (per engine rank: a dead worker's siblings do not keep it alive), and stop when the learner
        aborted the send."""
        def tick() -> None:
            actor, inc, worker = self.member
            if actor:
                self.hub.beat(actor, inc, worker=worker)
            if self.hub.has(f"s{seq}/abort"):
                raise RuntimeError(f"the learner aborted send {seq}")
        return tick

    def abandon(self) -> None:
        # Leave the group at once, so the learner's broadcast fails now instead of at its timeout.
        self.shutdown()

    def shutdown(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def register() -> None:
    """Make lagrl's backends known to vLLM's factory in this process (idempotent)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    for name, engine in ((BACKEND, LagrlCollectiveEngine), (SHM_BACKEND, LagrlShmEngine),
                         (IPC_BACKEND, LagrlIpcEngine)):
        if name not in WeightTransferEngineFactory._registry:
            WeightTransferEngineFactory.register_engine(name, engine)
