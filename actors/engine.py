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

import os
import signal
import sys
import threading
import time

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
    return LLM(**kwargs, **extra)


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
