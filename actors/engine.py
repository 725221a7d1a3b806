"""Build one vLLM engine from an ActorConfig, with the settings RL needs, and tie its processes to the actor.

- `logprobs_mode="processed_logprobs"`: the behaviour log-prob of each sampled token is taken
  from the distribution actually sampled (after temperature), which is what the learner's
  log π(y|x)/τ is compared against in the importance ratio.
- Where the engine core runs (``ActorConfig.engine_process``): in its own child process
  (``separate``: vLLM's default, always on GPU) or in the actor's process (``in_process``: the
  CPU default, one process to restart when an actor dies). Nothing may rely on the engine being
  in-process: vLLM's IPC does not carry tensors as ``collective_rpc`` arguments, so every weight
  transport loads through a weight-transfer engine (``actors.transport.vllm_engine``), the same
  code either way.
- An engine process dies with its actor: :func:`watch_owner` runs in every vLLM worker process
  (``actors.worker_extension`` starts it) and stops the engine core when the actor that started it
  is gone, however it went (SIGKILL included: nothing in the actor runs then). SIGTERM first:
  vLLM then shuts its processes down and removes its shared-memory message queues from
  ``/dev/shm`` (a killed engine leaves them behind); SIGKILL after ``OWNER_GRACE_S``. An actor that
  stops normally shuts its engine down itself (``GenerationActor.run``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from actors.config import ActorConfig

OWNER_ENV = "LAGRL_ENGINE_OWNER"    # "<pid>:<create time>" of the actor that builds the engine
OWNER_POLL_S = 1.0
OWNER_GRACE_S = 10.0                # from SIGTERM to SIGKILL of an orphaned engine


def _on_gpu(cfg: ActorConfig) -> bool:
    return cfg.num_gpus > 0


def engine_process(cfg: ActorConfig) -> str:
    """``separate`` or ``in_process``: ``auto`` is separate with GPUs, in-process on CPU."""
    if cfg.engine_process != "auto":
        return cfg.engine_process
    return "separate" if _on_gpu(cfg) else "in_process"


def set_engine_env(cfg: ActorConfig) -> None:
    """Must run before vllm is imported in this process (vLLM reads some of these at import)."""
    import psutil

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if engine_process(cfg) == "separate" else "0"
    if not _on_gpu(cfg):
        # inherited by a separate engine core: it allocates the KV cache
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.cpu_kv_cache_gib)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ[OWNER_ENV] = f"{os.getpid()}:{psutil.Process().create_time()}"


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
    if not _on_gpu(cfg):
        # A prompt prefilled in chunks has its first sampled token thrown away, and vLLM then rewinds the
        # request's generator (set_offset), which a CPU generator does not have: every seeded request (the
        # probe, a shared evaluation) whose prefill straddles a step's token budget raised there and left
        # the engine stalled. Whole prefills only on CPU (vLLM raises the budget to max_model_len if needed).
        kwargs["enable_chunked_prefill"] = False
    cap = kv_cache_cap_bytes(cfg, model_dir, max_num_seqs, dtype, gpu_total_bytes()) if _on_gpu(cfg) else None
    if cap is None or "kv_cache_memory_bytes" in extra:
        return LLM(**kwargs, **extra)
    try:
        return LLM(**kwargs, kv_cache_memory_bytes=cap, **extra)
    except TypeError as exc:        # a vLLM without the setting: its memory share sizes the cache
        if "kv_cache_memory_bytes" not in str(exc):
            raise
        return LLM(**kwargs, **extra)


# Model types whose KV cache per token is a K and a V vector of every layer (all layers attention, no
# latent or recurrent state), so that its size can be computed from the config alone.
PLAIN_KV_MODEL_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral"})
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


def kv_cache_cap_bytes(cfg: ActorConfig, model_dir: str, max_num_seqs: int, dtype: str,
                       gpu_total_bytes: int | None) -> int | None:
    """The KV cache a GPU engine can ever fill: ``max_num_seqs`` sequences at ``max_model_len`` (rounded up
    to 128 tokens, plus 128), when that is under a quarter of the engine's share of the GPU; else None
    (vLLM sizes the cache by the share). vLLM builds one Python object per KV block at start-up (0.12 ms
    a block on the 2-core CPU), and a small model's share of a GPU holds millions: the tiny model's
    quarter of an H100 ~1.2M blocks, where 16K hold every sequence (its engine took 146 s to start in a
    run there). Every sequence the scheduler may run fits, so nothing is preempted that the full share
    would keep."""
    try:
        hf = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if hf.get("model_type") not in PLAIN_KV_MODEL_TYPES or dtype not in DTYPE_BYTES or not gpu_total_bytes:
        return None
    heads = hf.get("num_attention_heads")
    kv_heads = hf.get("num_key_value_heads") or heads
    head_dim = hf.get("head_dim") or (hf.get("hidden_size", 0) // heads if heads else 0)
    layers = hf.get("num_hidden_layers")
    if not (kv_heads and head_dim and layers):
        return None
    per_token = 2 * layers * kv_heads * head_dim * DTYPE_BYTES[dtype]
    tokens = max_num_seqs * (math.ceil(cfg.max_model_len / 128) + 1) * 128
    cap = tokens * per_token
    return cap if cap < gpu_total_bytes * cfg.gpu_memory_utilization / 4 else None


def gpu_total_bytes() -> int | None:
    """This process's GPU's memory, from vLLM's platform (through NVML where vLLM has it: no CUDA context).
    None, said loudly, when it cannot be read: the KV cache then goes uncapped (sized by gpu_memory_utilization
    alone), and a small model's share of a large GPU is millions of blocks, minutes of engine start."""
    try:
        from vllm.platforms import current_platform

        return int(current_platform.get_device_total_memory(0))
    except Exception as exc:
        print(f"[lagrl] WARNING: could not read the GPU's total memory ({type(exc).__name__}: {exc}); the engine's "
              "KV cache is sized by gpu_memory_utilization alone, without the cap that keeps a small model's "
              "start-up short (actors.engine.kv_cache_cap_bytes)", flush=True)
        return None


def shutdown_engine(engine, engine_lock: threading.RLock, who: str) -> None:
    """An actor's last act: shut its engine down cleanly, so an out-of-process engine core and its workers
    exit now and remove their shared-memory queues (Ray kills what an actor leaves running when it is
    killed, and a killed engine leaves them in /dev/shm). A failure is printed, not raised."""
    try:
        with engine_lock:
            engine.engine_core.shutdown()
    except Exception as exc:
        print(f"[lagrl] {who}: engine shutdown failed: {type(exc).__name__}: {exc}", flush=True)


def engine_pids(pid: int | None = None) -> list[int]:
    """The processes an actor's engine runs in beside the actor itself (its descendants)."""
    import psutil

    return [p.pid for p in psutil.Process(pid or os.getpid()).children(recursive=True)]


def watch_owner(poll_s: float = OWNER_POLL_S, grace_s: float = OWNER_GRACE_S) -> threading.Thread | None:
    """In an engine process an actor started (the engine core, or a worker process below it): a
    daemon thread that stops the engine core (SIGTERM, SIGKILL after ``grace_s``) and this process
    once the actor is gone. None in the actor's own process, or in a process no actor started."""
    raw = os.environ.get(OWNER_ENV, "")
    if not raw:
        return None
    import psutil

    pid, _, created = raw.partition(":")
    owner = int(pid)
    if owner == os.getpid():
        return None
    me = psutil.Process()
    parent = me.parent()
    # the engine core is the actor's child; a worker process (vLLM's multiprocess executor, also
    # for one CPU worker) is the engine core's child
    core = parent if parent is not None and parent.pid != owner and parent.ppid() == owner else me

    def owner_alive() -> bool:
        try:
            p = psutil.Process(owner)
            return abs(p.create_time() - float(created)) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def watch() -> None:
        while owner_alive():
            time.sleep(poll_s)
        print(f"[lagrl] engine process {me.pid}: actor {owner} is gone; stopping the engine (pid {core.pid})",
              file=sys.stderr, flush=True)
        try:
            core.send_signal(signal.SIGTERM)       # vLLM shuts down its workers (this one too) and queues
            if core.pid == me.pid:
                time.sleep(grace_s)
            else:
                core.wait(grace_s)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            core.kill()
        os.kill(me.pid, signal.SIGKILL)

    thread = threading.Thread(target=watch, daemon=True, name="lagrl-owner-watch")
    thread.start()
    return thread
