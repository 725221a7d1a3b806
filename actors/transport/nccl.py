"""NCCL weight broadcast from learner rank 0 into every vLLM worker (GPU clusters).

Rank 0 of the learner and every engine worker (tensor-parallel ranks included) form one
NCCL group through vLLM's `StatelessProcessGroup` (it does not disturb the learner's
DeepSpeed group or the engines' own groups). The parameter list (HF names, shapes, dtypes)
never changes during a run, so it is exchanged once at `connect`; each update is then one
broadcast per tensor, received straight into GPU buffers and loaded with `reload_weights`.

Protocol per version (the broadcast is collective, so ordering matters):
  learner: publish(params, v) -> "nccl://host:port/v"; buffer.publish_version(v, location);
           after_announce()  # broadcasts; returns when every engine has received
  actor:   sees version v in the buffer -> load_into(llm, location)  # joins the broadcast
Actors poll the buffer between engine steps, so they join within one decode step.
"""

from __future__ import annotations

from typing import Iterable

import ray
import torch

from actors.transport import parse_location_version

NAME_DTYPES = {"torch.float32": torch.float32, "torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}


class NcclBroadcastTransport:
    scheme = "nccl"

    def __init__(self, run_id: str, master_address: str = "127.0.0.1", master_port: int = 0,
                 world_size: int = 0):
        self.run_id, self.master_address, self.master_port = run_id, master_address, master_port
        self.world_size = world_size   # 1 (learner rank 0) + total engine workers
        self._comm = None
        self._pending: list[torch.Tensor] = []

    # ---- learner side
    def connect_learner(self, params: Iterable[tuple[str, torch.Tensor]], actors: list) -> None:
        """Form the group: rank 0 here, ranks 1.. in the engines (each actor offsets its workers)."""
        from vllm.distributed.weight_transfer.nccl_common import stateless_init_process_group

        meta = [(n, tuple(t.shape), str(t.dtype)) for n, t in params]
        per_actor = ray.get([a.engine_world_size.remote() for a in actors])
        self.world_size = 1 + sum(per_actor)
        offsets = [1 + sum(per_actor[:i]) for i in range(len(actors))]
        joins = [a.connect_nccl.remote(self.master_address, self.master_port, off, self.world_size, meta)
                 for a, off in zip(actors, offsets)]
        self._comm = stateless_init_process_group(self.master_address, self.master_port, 0,
                                                  self.world_size, torch.cuda.current_device())
        ray.get(joins)

    def publish(self, params: Iterable[tuple[str, torch.Tensor]], version: int) -> str:
        self._pending = [t.detach().contiguous() for _, t in params]
        return f"{self.scheme}://{self.master_address}:{self.master_port}/{version}"

    def after_announce(self) -> None:
        stream = torch.cuda.current_stream()
        for t in self._pending:
            self._comm.broadcast(t, src=0, stream=stream)
        stream.synchronize()
        self._pending = []

    # ---- actor side
    def load_into(self, llm, location: str) -> None:
        parse_location_version(location)  # validates the form
        llm.collective_rpc("lagrl_nccl_receive")


class NcclWorkerMixin:
    """Methods added to `LagrlWorkerExtension` for the NCCL path (run inside each vLLM worker)."""

    def lagrl_nccl_connect(self, address: str, port: int, rank_offset: int, world_size: int, meta) -> None:
        from vllm.distributed.weight_transfer.nccl_common import stateless_init_process_group

        self._lagrl_meta = meta
        self._lagrl_comm = stateless_init_process_group(address, port, rank_offset + self.rank,
                                                        world_size, self.device)

    def lagrl_nccl_receive(self) -> int:
        stream = torch.cuda.current_stream()
        received = []
        for name, shape, dtype in self._lagrl_meta:
            buf = torch.empty(shape, dtype=NAME_DTYPES[dtype], device=self.device)
            self._lagrl_comm.broadcast(buf, src=0, stream=stream)
            received.append((name, buf))
        stream.synchronize()
        self.reload_weights(weights_iterator=iter(received), is_checkpoint_format=True)
        return len(received)
