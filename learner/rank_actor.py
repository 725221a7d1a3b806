"""The learner's Ray actor group: one actor per DeepSpeed rank, and a fan-out handle.

Each ``LearnerRank`` is a process of its own (as ``deepspeed`` launches would give), so
``torch.distributed`` state never leaks into the driver. Rank 0 picks the rendezvous address
(its node IP and a free port), every rank gets MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE /
LOCAL_RANK and calls ``deepspeed.init_distributed`` (gloo on CPU, nccl on GPU; ``learner.deepspeed_kit``,
which builds no op). Ranks are placed with a PACK placement group, one bundle per rank
(``learner.gpus_per_rank`` GPUs on CUDA: below 1 engines may share the GPU, and the rank caps its
allocator at ``learner.memory_fraction()``), each with ``learner.resources`` and, on a cluster, off
the driver's node (``actors.cluster.placement``). Each rank opens the model where its node has it
(``actors.cluster.model_source``: the shared path or the node-local cache).

Every method that runs collectives (setup, train, score, publish, checkpoint) must be called
on all ranks at once: :meth:`RankGroup.call` does exactly that.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Callable, Sequence

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from learner.trainer_config import LearnerConfig


@ray.remote
class LearnerRank:
    """One DeepSpeed rank; the engine lives in this process (see ``learner.engine``)."""

    def __init__(self, rank: int, world: int, device: str = "cpu"):
        self.rank, self.world, self.device = rank, world, device
        self.engine = None
        self.transport = None
        self.prm = None          # PRIME's implicit PRM (learner.prm_engine), built by setup_prm
        self._setup = None       # (model_dir, group_size, device) of setup: the PRM starts from the same

    @staticmethod
    def _node_ip() -> str:
        """This node's IP as registered with Ray (loopback on a node started with 127.0.0.1)."""
        node_id = ray.get_runtime_context().get_node_id()
        return next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)

    def rendezvous(self) -> tuple[str, int]:
        """(this node's IP as registered with Ray, a free port on it) for the process group's
        TCP store; a node started with ``--node-ip-address 127.0.0.1`` stays on loopback."""
        ip = self._node_ip()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            return ip, s.getsockname()[1]

    def setup(self, cfg: LearnerConfig, model_dir, group_size: int, seed: int, addr: str, port: int,
              device: str, local_rank: int) -> dict[str, Any]:
        from actors.cluster.heap import freeze_startup_heap
        from actors.cluster.model_source import resolve_model_dir
        from actors.cluster.priority import warn_if_niced

        model_dir = resolve_model_dir(model_dir)    # this node's copy; ModelUnavailable names path and node
        warn_if_niced(f"learner rank {self.rank}")
        # Quiet by default: a run's console is its progress lines. DS_ACCELERATOR named up front
        # spares DeepSpeed's "unable to detect an accelerator" warning; model loads and checkpoint
        # writes show no progress bars.
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if device == "cuda" else "cpu")
        import torch
        from transformers.utils import logging as hf_logging

        from learner.deepspeed_kit import init_distributed, set_rendezvous

        hf_logging.disable_progress_bar()
        set_rendezvous(addr, port, self.rank, self.world, local_rank)
        if device == "cuda":
            torch.cuda.set_device(0)
            if cfg.memory_fraction() is not None:   # a GPU shared with engines: stay within this rank's share
                torch.cuda.set_per_process_memory_fraction(cfg.memory_fraction(), 0)
        else:
            torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
        init_distributed(device)
        from learner.engine import RankEngine
        from learner.optimizer import optimizer_label

        self.engine = RankEngine(cfg, model_dir, self.rank, self.world, device, group_size, seed)
        self._setup, self.device = (model_dir, group_size, device), device
        freeze_startup_heap()          # no full collection walks the model and libraries mid-update
        return {"rank": self.rank, "version": self.engine.version, "threads": torch.get_num_threads(),
                "ds_config": self.engine.ds_config, "optimizer": self.engine.optimizer_name,
                "optimizer_label": optimizer_label(self.engine.optimizer_name, device)}

    def train_updates(self, rows, updates: Sequence[tuple[int, list[list[int]], int | None]], loss_cfg,
                      temperature: float, entropy_coef: float) -> list[tuple[dict, dict]]:
        """Several consecutive optimizer updates: ``updates`` = [(version, micro-batches, required lag)]."""
        return [self.engine.train_update(rows, mbs, version, loss_cfg, temperature, entropy_coef, required)
                for version, mbs, required in updates]

    def score_rows(self, rows, micro_batches: list[list[int]], loss_cfg, temperature: float, which: str,
                   what: str = "logp") -> dict:
        return self.engine.score_rows(rows, micro_batches, loss_cfg, temperature, which, what)

    # --- PRIME's implicit PRM (learner.prm_engine) ---------------------------------------------
    def setup_prm(self, cfg: LearnerConfig) -> bool:
        """Build the PRM from the rank group's model dir unless one with the same settings exists;
        True when a new one was built (collective: DeepSpeed initialises on every rank)."""
        from learner.prm_engine import PrmEngine, prm_signature

        model_dir, group_size, device = self._setup
        if self.prm is not None and self.prm.signature == prm_signature(cfg, cfg.prime):
            return False
        self.prm = PrmEngine(cfg, cfg.prime, model_dir, self.rank, self.world, device, group_size)
        return True

    def prm_update(self, rows, micro_batches: list[list[int]], ref: dict, num_responses: int, beta: float,
                   chunk: int) -> tuple[dict, dict]:
        return self.prm.update(rows, micro_batches, ref, num_responses, beta, chunk)

    def prm_score(self, rows, micro_batches: list[list[int]], chunk: int) -> dict:
        return self.prm.score(rows, micro_batches, chunk)

    def prm_state_dict(self):
        return self.prm.full_state_dict()

    def set_transport(self, transport):
        """Keep the weight transport for this actor's lifetime (Ray reference-counts the object
        store transport's store actor by its handles, so a per-call copy would let it die after
        publish) and bind it here; rank 0's answer is the transport the actors get (a collective
        one carries the address of the hub rank 0 now serves). Needs no engine: it may run before setup."""
        self.transport = transport
        return transport.bind_learner(self.rank, self._node_ip(), self.device)

    def publish(self, version: int) -> str | None:
        return self.engine.publish(self.transport, version)

    def after_announce(self, catch_up: bool = False) -> dict | None:
        """The transport's second half, once the version is in the buffer (every rank: under
        ZeRO-3 the weights are gathered bucket by bucket while rank 0 broadcasts)."""
        return self.transport.after_announce(self.engine.weights(), catch_up=catch_up)

    def transport_status(self) -> dict | None:
        """Rank 0: which actors the transport sees live and whether one lacks the published version."""
        return self.transport.learner_status() if self.rank == 0 else None

    def save_checkpoint(self, ckpt: str, init_model_dir: str) -> None:
        from learner.checkpoint import PRM_DIR, save_rank

        # the tokenizer files come from this node's copy of the model (the driver's path may not exist here)
        save_rank(self.engine, Path(ckpt), self.engine.model_dir or init_model_dir)
        if self.prm is not None:
            save_rank(self.prm, Path(ckpt) / PRM_DIR, self.engine.model_dir or init_model_dir)

    def load_checkpoint(self, ckpt: str) -> int:
        """Policy (and PRM, when this rank has one and the checkpoint holds one); the policy's version."""
        from learner.checkpoint import PRM_DIR, load_rank

        if self.prm is not None and (Path(ckpt) / PRM_DIR).is_dir():
            load_rank(self.prm, Path(ckpt) / PRM_DIR)
        return load_rank(self.engine, Path(ckpt))

    def full_state_dict(self):
        return self.engine.full_state_dict()

    def version(self) -> int:
        return self.engine.version


def _cluster_has_gpus() -> bool:
    return ray.cluster_resources().get("GPU", 0) > 0


class RankGroup:
    """N ``LearnerRank`` actors forming one DeepSpeed data-parallel group."""

    def __init__(self, cfg: LearnerConfig, model_dir, group_size: int, seed: int = 0, *, transport=None,
                 on_transport=None):
        """``model_dir``: a path or an ``actors.cluster.model_source.ModelSource`` (each rank resolves it).
        ``transport``: bound on every rank before the engines are set up; rank 0's answer is
        ``actor_transport``, handed to ``on_transport(actor_transport)`` at once, so the caller can
        start the generation engines while the ranks load DeepSpeed and the model."""
        from actors.cluster import placement as place

        self.cfg = cfg.model_copy()
        self.signature = cfg.engine_signature()
        self.model = model_dir
        self.model_dir = str(model_dir)
        self.device = cfg.device if cfg.device != "auto" else ("cuda" if _cluster_has_gpus() else "cpu")
        gpus = cfg.gpus_per_rank if self.device == "cuda" else 0   # < 1: engines may share the GPU
        n = cfg.num_ranks
        selector = place.off_driver_selector(cfg.avoid_driver_node)
        self.pg = placement_group([{"CPU": cfg.cpus_per_rank, **({"GPU": gpus} if gpus else {}), **cfg.resources}] * n,
                                  strategy="PACK", **({"bundle_label_selector": [selector] * n} if selector else {}))
        needs = place.describe_needs(cfg.resources, selector, cfg.cpus_per_rank, gpus)
        place.wait_started({"learner placement group": self.pg.ready()},
                           lambda _: f"{n} bundle(s) of {needs}, packed")
        self.actors = [
            LearnerRank.options(num_cpus=cfg.cpus_per_rank, num_gpus=gpus, scheduling_strategy=
                                PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=r))
            .remote(r, n, self.device) for r in range(n)]
        addrs = ray.get([a.rendezvous.remote() for a in self.actors])
        self.actor_transport = None
        if transport is not None:
            self.actor_transport = self.call("set_transport", transport)[0]
            if on_transport is not None:
                on_transport(self.actor_transport)
        self.nodes: list[dict] = []     # where each rank runs (actors.cluster.placement.locate), after setup
        master_addr, port = addrs[0]
        local = _local_ranks([ip for ip, _ in addrs])
        # On GPU each actor sees only its own device (Ray sets CUDA_VISIBLE_DEVICES): LOCAL_RANK 0.
        self.info = self.call_each("setup", [
            (self.cfg, self.model, group_size, seed, master_addr, port, self.device,
             local[r] if self.device == "cpu" else 0)
            for r in range(n)])
        self.optimizer, self.optimizer_label = self.info[0]["optimizer"], self.info[0]["optimizer_label"]
        located = place.locate({str(r): a for r, a in enumerate(self.actors)})
        self.nodes = [located[str(r)] for r in range(n)]

    @property
    def world(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args, **kwargs) -> list:
        """Run ``method`` with the same arguments on every rank concurrently; results by rank."""
        return ray.get([getattr(a, method).remote(*args, **kwargs) for a in self.actors])

    def call_each(self, method: str, rank_args: Sequence[tuple], while_waiting: Callable[[], None] | None = None,
                  every_s: float = 0.05) -> list:
        """Run ``method`` on every rank concurrently with rank r's arguments ``rank_args[r]``;
        ``while_waiting()`` runs at once and then every ``every_s`` seconds until all ranks are done (it
        must not block)."""
        refs = [getattr(a, method).remote(*rank_args[r]) for r, a in enumerate(self.actors)]
        while while_waiting is not None:
            while_waiting()
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=every_s)
            if len(ready) == len(refs):
                break
            ray.get(ready)              # a rank that failed raises now, not once the others give up
        return ray.get(refs)

    def version(self) -> int:
        versions = set(self.call("version"))
        if len(versions) != 1:
            raise RuntimeError(f"ranks disagree on the policy version: {sorted(versions)}")
        return versions.pop()

    def check_compatible(self, cfg: LearnerConfig) -> None:
        diff = {k: (v, getattr(cfg, k)) for k, v in self.signature.items() if getattr(cfg, k) != v}
        if diff:
            raise ValueError(f"rank group was built with different engine settings: {diff}")

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        remove_placement_group(self.pg)


def _local_ranks(ips: list[str]) -> list[int]:
    """LOCAL_RANK per global rank: its index among the ranks on the same node (by IP)."""
    out, seen = [], {}
    for ip in ips:
        out.append(seen.get(ip, 0))
        seen[ip] = seen.get(ip, 0) + 1
    return out
