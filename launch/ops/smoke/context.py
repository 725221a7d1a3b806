"""What the smoke stages share: the device, the tiny world, the run config, Ray, and one engine at a time.

Written against the GPU work of issue 29 where it has landed and tolerant where it has not:
``ActorConfig.engine_process`` (the engine core in its own process) and ``weight_transport: auto`` are
used when the config has them (:data:`ENGINE_PROCESS`, :func:`transport_choices`).
"""

from __future__ import annotations

import gc
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path

from actors.config import ActorConfig, CollectiveConfig
from actors.engine import build_llm
from actors.transport import transport_for
from actors.transport.registry import Where, fitting
from launch.run.compose import build_config
from launch.run.driver import init_ray
from launch.worlds.tiny.build import ensure_tiny_world

ENGINE_PROCESS = "engine_process" in ActorConfig.model_fields     # the engine core's process, when selectable
GPU_ENGINE_MEMORY = 0.25      # of the GPU, for the tiny engines of stages 2-3 and the run's actor (stage 5)


def transport_choices() -> tuple[str, ...]:
    """The values ``ActorConfig.weight_transport`` accepts (``auto`` once the one-GPU layout landed)."""
    from typing import get_args

    return get_args(ActorConfig.model_fields["weight_transport"].annotation)


@dataclass
class Context:
    device: str                    # "cuda" | "cpu"
    work: Path                     # scratch space: run directories, model directories, logs
    steps: int                     # learner steps of stage 5
    llm: object | None = None      # the engine of stages 2-3 (engine core in its own process)
    llm_kwargs: dict | None = None
    _tiny: object | None = None
    _run_cfg: object | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def engine_dtype(self) -> str:
        return "bfloat16" if self.cuda else "float32"      # bf16 on CPU is slow and not what a CPU run uses

    def tiny(self):
        if self._tiny is None:
            self._tiny = ensure_tiny_world()
        return self._tiny

    # ---- engines
    def actor_config(self, **changes) -> ActorConfig:
        """The engine settings of stages 2, 3 and 6: the engine core in its own process when selectable."""
        base = dict(num_actors=1, max_model_len=256, max_prompts_in_flight=8, enforce_eager=True,
                    dtype=self.engine_dtype, num_gpus=1.0 if self.cuda else 0.0,
                    gpu_memory_utilization=GPU_ENGINE_MEMORY)
        if ENGINE_PROCESS:
            base["engine_process"] = "separate"
        return ActorConfig(**(base | changes))

    def engine(self, llm_kwargs: dict):
        """The tiny-model engine built with ``llm_kwargs`` (a transport's), reusing the current one when
        it was built with those settings (an engine holds one weight-transfer backend)."""
        if self.llm is not None and all(self.llm_kwargs.get(k) == v for k, v in llm_kwargs.items()):
            return self.llm
        self.close_engine()
        self.llm = build_llm(self.actor_config(), str(self.tiny().model_dir), seed=0, max_num_seqs=64, **llm_kwargs)
        self.llm_kwargs = llm_kwargs
        return self.llm

    def close_engine(self) -> None:
        if self.llm is not None:
            close_llm(self.llm)
            self.llm = self.llm_kwargs = None

    # ---- transports: (learner side bound in this process, the actor's copy)
    def transport_pair(self, kind: str, run_id: str):
        # gloo on every device: the engine shares this process's device, and NCCL refuses two ranks on one
        cfg = self.actor_config(weight_transport=kind, collective=CollectiveConfig(
            backend="gloo", join_timeout_s=120, collective_timeout_s=120, stale_after_s=60))
        learner_side = transport_for(cfg, run_id).bind_learner(0, "127.0.0.1", self.device)
        return learner_side, pickle.loads(pickle.dumps(learner_side))

    def smoke_transports(self) -> list[str]:
        """The registered transports one device allows, learner side and engine on it together (their
        registry capabilities; a collective goes over gloo, never NCCL: see ``transport_pair``)."""
        return fitting(Where(self.device, self.device, shared_gpu=self.cuda))

    def shared_llm_kwargs(self) -> dict:
        """Engine arguments that serve every smoke transport at once when they do not conflict (one
        engine start instead of one per transport), else the first transport's."""
        merged: dict = {}
        for kind in self.smoke_transports():
            kwargs = transport_for(self.actor_config(weight_transport=kind), "smoke").llm_kwargs()
            if any(k in merged and merged[k] != v for k, v in kwargs.items()):
                return transport_for(self.actor_config(weight_transport=self.smoke_transports()[0]),
                                     "smoke").llm_kwargs()
            merged |= kwargs
        return merged

    # ---- the run of stage 5 (and Ray for every stage that needs it)
    def run_config(self):
        if self._run_cfg is None:
            argv = ["--tiny", "--steps", str(self.steps), "--run_dir", str(self.work / "runs"),
                    "--run_id", f"smoke-{time.strftime('%H%M%S')}", "--data.eval_max_problems", "8",
                    "--data.eval_n", "2", "--learner.checkpoint_every", "0"]
            if ENGINE_PROCESS:
                argv += ["--actors.engine_process", "separate"]
            if "auto" in transport_choices():
                argv += ["--actors.weight_transport", "auto"]
            if self.cuda:       # one GPU shared by the run's actor and learner rank (the one-GPU layout)
                argv += ["--actors.dtype", "bfloat16", "--actors.num_gpus", "0.5",
                         "--actors.gpu_memory_utilization", str(GPU_ENGINE_MEMORY),
                         "--learner.device", "cuda", "--learner.dtype", "bf16", "--learner.gpus_per_rank", "0.5"]
            self._run_cfg, _ = build_config(argv, "onpolicy")
        return self._run_cfg

    def ensure_ray(self) -> None:
        """Ray as the run of stage 5 starts it (so that run joins this one instead of starting another)."""
        init_ray(self.run_config())

    def close(self) -> None:
        self.close_engine()
        try:
            import ray
            if ray.is_initialized():
                ray.shutdown()
        except Exception:
            pass


def close_llm(llm) -> None:
    """Stop an engine and give its memory back (its engine-core process exits)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    try:
        if core is not None:
            core.shutdown()
    finally:
        del llm, core
        gc.collect()
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass


def engine_core_process(llm) -> tuple[bool, int | None]:
    """(whether the engine core runs in this process, the pid of the process it runs in)."""
    import os

    core = llm.llm_engine.engine_core
    if type(core).__name__ == "InprocClient":
        return True, os.getpid()
    manager = getattr(getattr(core, "resources", None), "engine_manager", None)
    procs = getattr(manager, "processes", None) or []
    return False, (procs[0].pid if procs else None)
