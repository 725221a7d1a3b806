"""Stage 4: one DeepSpeed update of ``learner.engine.RankEngine`` at ZeRO-0 and at ZeRO-2, in this process
(a one-rank group), with the optimizer DeepSpeed really built named and the peak memory of each."""

from __future__ import annotations

import gc
import math
import os
import resource
import socket
import time
from pathlib import Path

from launch.ops.smoke.context import Context
from launch.ops.smoke.report import require
from learner.batching import Row, plan_update
from learner.config import BatchConfig
from learner.deepspeed_kit import init_distributed, set_rendezvous
from learner.engine import RankEngine
from learner.trainer_config import LearnerConfig


def init_single_rank(cuda: bool) -> None:
    """This process as rank 0 of a one-rank group (nccl on GPU, gloo on CPU), once, as a learner rank
    starts (``learner.deepspeed_kit``: no op compiled)."""
    import torch.distributed as dist


    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    set_rendezvous("127.0.0.1", port, 0, 1, 0)
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if cuda else "cpu")
    if cuda:
        import torch

        torch.cuda.set_device(0)
    init_distributed("cuda" if cuda else "cpu")


def learner_config(ctx: Context, zero_stage: int, **changes):
    fields = dict(lr=1e-4, batch=BatchConfig(rollout_batch=1, mini_batch=1), device=ctx.device,
                  zero_stage=zero_stage, dtype="bf16" if ctx.cuda else "fp32", micro_batch_tokens=4096)
    fields["optimizer"] = "auto"                           # torch AdamW unless DeepSpeed's ops are prebuilt
    return LearnerConfig(**(fields | changes))


def synthetic_rows(vocab: int, rows: int, prompt_len: int, response_len: int, seed: int = 0):
    """Random prompts and responses (lengths in [response_len/2, response_len]) at version 0."""
    import numpy as np


    rng = np.random.default_rng(seed)
    return [Row(prompt_ids=rng.integers(2, vocab, prompt_len).astype(np.int32),
                response_ids=rng.integers(2, vocab, int(n)).astype(np.int32),
                old_logprobs=np.full(int(n), -math.log(vocab), np.float32), advantage=float(rng.normal()),
                version_start=0, version_end=0, group_index=0)
            for n in rng.integers(max(1, response_len // 2), response_len + 1, rows)]


def optimizer_name(engine) -> str:
    """The torch optimizer inside DeepSpeed's wrappers, e.g. 'BF16_Optimizer > torch AdamW (fused)'."""
    import torch

    outer, inner, hops = [], engine.optimizer, 0
    while not isinstance(inner, torch.optim.Optimizer) and hasattr(inner, "optimizer") and hops < 5:
        outer.append(type(inner).__name__)
        inner, hops = inner.optimizer, hops + 1
    module = type(inner).__module__.split(".")[0]
    fused = " (fused)" if isinstance(getattr(inner, "defaults", None), dict) and inner.defaults.get("fused") else ""
    return " > ".join(outer + [f"{module} {type(inner).__name__}{fused}"])


def ops_built_since(t0: float) -> list[str]:
    """Torch extensions (DeepSpeed's JIT ops) whose library was written after ``t0``: compiled at run time."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    return sorted({p.parent.name for p in root.glob("*/*/*.so") if p.stat().st_mtime >= t0}
                  | {p.parent.name for p in root.glob("*/*.so") if p.stat().st_mtime >= t0})


def peak_memory_mib(cuda: bool) -> float:
    import torch

    if cuda:
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024      # KiB on Linux; process lifetime


def one_update(ctx: Context, zero_stage: int) -> dict:
    import torch


    cfg = learner_config(ctx, zero_stage)
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.monotonic()
    engine = RankEngine(cfg, str(ctx.tiny().model_dir), 0, 1, ctx.device, group_size=8)
    init_s = time.monotonic() - t0
    try:
        rows = synthetic_rows(engine.vocab_size, rows=8, prompt_len=16, response_len=32)
        mbs = plan_update(rows, list(range(len(rows))), cfg.micro_batch_tokens, 1, cfg.packs_on(ctx.device))[0]
        first = next(engine.engine.module.parameters())
        before = first.detach().clone()
        t1 = time.monotonic()
        metrics, info = engine.train_update(rows, mbs, 0, cfg.loss, 1.0, 1e-3, required_lag=0)
        if ctx.cuda:
            torch.cuda.synchronize()
        step_s = time.monotonic() - t1
        loss, norm = metrics.get("loss/total", float("nan")), info["grad/norm"]
        require(math.isfinite(loss) and math.isfinite(norm) and norm > 0,
                f"ZeRO-{zero_stage}: loss {loss}, grad norm {norm} (want finite, norm > 0)")
        require(not torch.equal(before, first.detach()), f"ZeRO-{zero_stage}: the update left the weights as they were")
        require(engine.version == 1, f"ZeRO-{zero_stage}: version {engine.version} after one update")
        return {"optimizer": optimizer_name(engine.engine), "dtype": str(engine.dtype).removeprefix("torch."),
                "loss": loss, "grad_norm": norm, "init_s": round(init_s, 2), "step_s": round(step_s, 3),
                "peak_mib": round(peak_memory_mib(ctx.cuda), 1),
                "peak_kind": "GPU max allocated" if ctx.cuda else "process peak RSS"}
    finally:
        engine.engine.destroy()          # else ZeRO's C++ grad hooks keep it alive (test_learner_engine_release)
        del engine
        gc.collect()                 # DeepSpeed's engine holds reference cycles; its memory goes with them
        if ctx.cuda:
            torch.cuda.empty_cache()


def learner_stage(ctx: Context) -> dict:
    t0 = time.time()
    init_single_rank(ctx.cuda)
    stages = {f"zero{z}": one_update(ctx, z) for z in (0, 2)}
    built = ops_built_since(t0)
    line = "; ".join(f"ZeRO-{k[4:]} {v['dtype']}: {v['optimizer']}, loss {v['loss']:.4f}, "
                     f"grad norm {v['grad_norm']:.3g}, step {v['step_s']:.2f} s, "
                     f"peak {v['peak_mib']:.0f} MiB ({v['peak_kind']})"
                     for k, v in stages.items())
    # DESIGN.md §8: nothing is compiled at run time (a GPU host may have no nvcc; on CPU a build costs minutes)
    require(not built, f"DeepSpeed compiled {built} at run time; {line}")
    return {"line": line + (f"; compiled at run time: {built}" if built else "; no op compiled"),
            "ops_built_at_run_time": built, **stages}
