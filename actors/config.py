"""Generation actor settings: engines, placement and how many actors run.

What every response is sampled with (group size, temperature, the stage's response budget) is
the run's (``RunConfig``): each prompt message carries it (``PromptMsg.n_samples``,
``temperature``, ``max_tokens``), so actors only execute what the feeder asks for.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from actors.cluster.placement import CustomResources
from actors.transport import registry
from actors.transport.config import CollectiveConfig
from actors.transport.registry import TransportKind


def _transport_help() -> str:
    kinds = "; ".join(f"'{name}'" + "".join(f" (or '{a}')" for a in e.aliases) + f": {e.help}"
                      for name, e in registry.TRANSPORTS.items())
    return (f"How new weights reach the engines (actors.transport.registry): {kinds}. 'auto': the driver picks "
            "from the placement by the transports' capabilities and says why (launch.config.layout; today ray on "
            "CPU, collective over gloo when the learner and engines share a GPU, collective over NCCL on separate "
            "GPUs, ray for a fixed lag).")


class ActorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_actors: int = Field(2, ge=1, description="Number of GenerationActors (one vLLM engine each).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling; keep 1.0 for unbiased behaviour log-probs.")
    max_model_len: int = Field(32768, ge=16, description="vLLM context length (prompt + response).")
    max_prompts_in_flight: int = Field(64, ge=1, description="Prompts an actor keeps in its engine at once (continuous batching).")
    weight_transport: TransportKind = Field("auto", description=_transport_help())
    collective: CollectiveConfig = Field(default_factory=CollectiveConfig, description="Settings of the collective weight transport.")
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs per actor (0 on CPU); tensor_parallel_size GPUs are needed per engine. Below 1 the engine may share its GPU with the learner or other engines (tensor_parallel_size 1 only); its gpu_memory_utilization must then fit in that share.")
    num_cpus: float = Field(1.0, gt=0.0, description="CPUs Ray reserves per actor.")
    tensor_parallel_size: int = Field(1, ge=1, description="vLLM tensor parallelism per engine (GPU only).")
    engine_process: Literal["auto", "in_process", "separate"] = Field("auto", description="Where vLLM's engine core runs: 'separate' = a child process of the actor (vLLM's own default on GPU), 'in_process' = the actor's process; auto = separate with GPUs, in_process on CPU. Weights reach either through a weight-transfer engine (actors/transport/vllm_engine.py).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Engine dtype; auto = bf16 on GPU, fp32 on CPU.")
    enforce_eager: bool = Field(True, description="Skip graph capture/compilation: much faster start-up, slower decoding; off for long GPU runs.")
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="Fraction of the GPU's memory this vLLM engine may use (weights, activations, KV cache); at most num_gpus when the engine shares a GPU.")
    cpu_memory_utilization: float = Field(0.1, gt=0.0, le=1.0, description="On CPU vLLM checks this fraction of RAM is free at start-up (several engines and the learner share a node); the KV cache itself is cpu_kv_cache_gib.")
    cpu_kv_cache_gib: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU engines (GiB).")
    max_restarts: int = Field(3, ge=0, description="Ray restarts a crashed actor this many times; its un-ACKed prompts are reclaimed.")
    heartbeat_s: float = Field(2.0, gt=0.0, description="Seconds between heartbeats in the buffer's actors hash.")
    idle_poll_ms: int = Field(200, ge=1, description="How long an idle actor blocks on the prompts stream per poll.")

    @field_validator("weight_transport", mode="plain")
    @classmethod
    def _registered(cls, value):
        """The registry decides (aliases resolved, an unknown name refused naming the known ones), so a
        transport registered after import is accepted too; the Literal above documents the choices."""
        if not isinstance(value, str):
            raise ValueError(f"weight_transport must be a string: one of {registry.known()}")
        return registry.canonical(value, allow_auto=True)

    @model_validator(mode="after")
    def _gpu_share(self) -> ActorConfig:
        problems = gpu_share_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def shares_gpu(self) -> bool:
        """An engine on a fraction of a GPU: the learner or other engines may be on the same one."""
        return 0 < self.num_gpus < 1

    def transport_or_default(self) -> ActorConfig:
        """This config with weight_transport 'auto' made concrete where no placement is known (an
        actor built without the driver): ``registry.auto_kind`` without a placement (the object store).
        The driver resolves 'auto' from the placement first (launch.config.layout)."""
        if self.weight_transport != "auto":
            return self
        return self.model_copy(update={"weight_transport": registry.auto_kind(None)})

    # --- placement on a cluster (actors.cluster.placement) ---
    resources: CustomResources = Field(
        default_factory=dict, description="Custom Ray resources each actor needs, e.g. {\"gen\": 1}: actors "
        "go only to nodes started with them (`ray start --resources '{\"gen\": 2}'`). {} = any node. "
        "CPUs and GPUs are num_cpus / num_gpus.")
    avoid_driver_node: bool = Field(
        True, description="In a Ray cluster of several nodes, never place an actor on the driver's node "
        "(a single-node Ray is unaffected).")


def gpu_share_problems(cfg: ActorConfig) -> list[str]:
    """Why an engine on a fraction of a GPU cannot work as configured, or [] (each names the fix)."""
    if not cfg.shares_gpu:
        return []
    problems = []
    if cfg.tensor_parallel_size > 1:
        problems.append(f"num_gpus={cfg.num_gpus:g} with tensor_parallel_size={cfg.tensor_parallel_size}: vLLM "
                        "places one tensor-parallel worker per whole GPU; use --actors.num_gpus 1 for tensor "
                        "parallelism, or --actors.tensor_parallel_size 1 to share a GPU")
    if cfg.gpu_memory_utilization > cfg.num_gpus:
        problems.append(f"gpu_memory_utilization={cfg.gpu_memory_utilization:g} exceeds the engine's GPU share "
                        f"num_gpus={cfg.num_gpus:g}: engines and the learner packed on one GPU would ask for more "
                        f"than its memory; set --actors.gpu_memory_utilization {cfg.num_gpus:g} or less")
    if registry.backend_asked(cfg) == "nccl":
        problems.append(f"num_gpus={cfg.num_gpus:g} with collective.backend=nccl: an engine on a shared GPU would "
                        "put two NCCL ranks on one GPU, which NCCL refuses; use --actors.collective.backend gloo "
                        "(or auto), or --actors.num_gpus 1")
    return problems
