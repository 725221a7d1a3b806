"""Build one vLLM engine from an ActorConfig, with the settings RL needs.

- `logprobs_mode="processed_logprobs"`: the behaviour log-prob of each sampled token is taken
  from the distribution actually sampled (after temperature), which is what the learner's
  log π(y|x)/τ is compared against in the importance ratio.
- On CPU the engine core runs in the actor's own process (VLLM_ENABLE_V1_MULTIPROCESSING=0): one
  process to restart when an actor dies, and weight swaps are plain calls between engine steps.
"""

from __future__ import annotations

import os

from actors.config import ActorConfig


def _on_gpu(cfg: ActorConfig) -> bool:
    return cfg.num_gpus > 0


def set_engine_env(cfg: ActorConfig) -> None:
    """Must run before vllm is imported in this process."""
    if not _on_gpu(cfg):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.cpu_kv_cache_gib)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_llm(cfg: ActorConfig, model_dir: str, seed: int, max_num_seqs: int, **extra):
    """``extra``: more ``LLM`` arguments (the weight transport's ``llm_kwargs()``)."""
    set_engine_env(cfg)
    from vllm import LLM

    dtype = cfg.dtype
    if dtype == "auto":
        dtype = "bfloat16" if _on_gpu(cfg) else "float32"
    kwargs = dict(
        model=model_dir, dtype=dtype, seed=seed, max_model_len=cfg.max_model_len,
        enforce_eager=cfg.enforce_eager, tensor_parallel_size=cfg.tensor_parallel_size,
        worker_extension_cls="actors.worker_extension.LagrlWorkerExtension",
        logprobs_mode="processed_logprobs", max_num_seqs=max_num_seqs,
        disable_log_stats=True,
    )
    kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization if _on_gpu(cfg) else cfg.cpu_memory_utilization
    return LLM(**kwargs, **extra)
