"""The SFT stage's work (``python -m launch.recipes.sft``): examples -> DeepSpeed updates -> an HF model dir.

One process per rank (``torchrun``/``deepspeed`` set RANK / WORLD_SIZE / LOCAL_RANK / MASTER_*; run
plainly it is one rank on a free loopback port). Every rank builds the same example order and the
same split of each batch (``learner.batching.plan_update``: token-budget micro-batches dealt to the
ranks, equal counts so ZeRO's collectives line up) and trains its share; the per-token loss is
sum / T_global with T_global the batch's response tokens on all ranks, the world-size factor undoes
DeepSpeed's gradient average (the RL engine's bookkeeping, ``learner.engine``; set up and stepped through
``learner.deepspeed_kit``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np

from launch.recipes.sft.config import SftConfig
from launch.run.data import PromptRenderer
from learner.batching import Row
from learner.checkpoint import copy_tokenizer_files
from learner.config import BatchConfig
from learner.deepspeed_kit import cpu_state_dict
from learner.trainer_config import LearnerConfig


def tokenize_examples(rows: list[dict], tokenizer, cfg: SftConfig) -> tuple[list, int]:
    """JSONL records -> training rows (``learner.batching.Row``: prompt ids, response ids + EOS);
    (rows, examples dropped for exceeding ``max_tokens``). A record without the fields raises."""
    renderer = PromptRenderer(tokenizer, chat_template=True, template=cfg.template) if cfg.render else None
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no EOS token: a response would never learn to stop")
    out, dropped = [], 0
    for n, row in enumerate(rows, 1):
        missing = [k for k in (cfg.prompt_key, cfg.response_key) if k not in row]
        if missing:
            raise ValueError(f"{cfg.train_path} row {n}: missing field(s) {missing}; has {sorted(row)}")
        prompt = renderer.ids(str(row[cfg.prompt_key])) if renderer else \
            tokenizer(str(row[cfg.prompt_key]), add_special_tokens=False)["input_ids"]
        response = tokenizer(str(row[cfg.response_key]), add_special_tokens=False)["input_ids"] + [eos]
        if not prompt or len(prompt) + len(response) > cfg.max_tokens:
            dropped += 1
            continue
        out.append(Row(prompt_ids=np.asarray(prompt, np.int32), response_ids=np.asarray(response, np.int32),
                       old_logprobs=np.zeros(len(response), np.float32), advantage=0.0, version_start=0,
                       version_end=0, group_index=len(out)))
    if not out:
        raise ValueError(f"{cfg.train_path}: no usable example ({dropped} longer than max_tokens={cfg.max_tokens})")
    return out, dropped


def update_plan(num_examples: int, cfg: SftConfig) -> list[list[int]]:
    """Example indices of every optimizer update: a seeded permutation per epoch cut into batches
    (the last batch of an epoch may be smaller); a fractional ``epochs`` keeps that share of updates."""
    per_epoch = math.ceil(num_examples / cfg.batch_size)
    total = max(1, round(cfg.epochs * per_epoch))
    plan = []
    for epoch in range(math.ceil(cfg.epochs)):
        order = np.random.default_rng(cfg.seed * 1_000_003 + epoch).permutation(num_examples).tolist()
        plan += [order[i:i + cfg.batch_size] for i in range(0, num_examples, cfg.batch_size)]
    return plan[:total]


def _engine_config(cfg: SftConfig, device: str):
    """The RL learner's engine layout and optimizer for the SFT settings (``deepspeed_config`` reads it)."""
    return LearnerConfig(mode="on_policy", batch=BatchConfig(rollout_batch=cfg.batch_size, mini_batch=cfg.batch_size),
                         lr=cfg.lr, warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay, betas=cfg.betas,
                         adam_eps=cfg.adam_eps, grad_clip=cfg.grad_clip, zero_stage=cfg.zero_stage, dtype=cfg.dtype,
                         device=device, micro_batch_tokens=cfg.micro_batch_tokens,
                         gradient_checkpointing=cfg.gradient_checkpointing)


def train_sft(cfg: SftConfig) -> dict:
    """Train and write ``cfg.out``; returns the summary also written to ``cfg.out/sft.json``."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if _has_cuda() else "cpu")
    # imported after DS_ACCELERATOR is set: DeepSpeed reads it when first imported (torch, transformers alike late)
    import torch
    import torch.distributed as dist
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from learner.batching import collate, plan_update
    from learner.deepspeed_kit import (
        build_engine,
        deepspeed_config,
        init_distributed,
        load_hf_model,
        optimizer_step,
        resolve_dtype,
        warmup_schedule,
    )
    from learner.logprobs import logprobs_and_entropy
    from learner.loss import deepspeed_loss_scale
    from learner.optimizer import optimizer_label
    from rewards.problems import read_jsonl

    hf_logging.disable_progress_bar()
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        raise FileExistsError(f"{out} exists: pass --overwrite true or another --out")
    start = time.monotonic()
    device = "cuda" if _has_cuda() else "cpu"
    rank, world = init_distributed(device)
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model_dir)
    rows, dropped = tokenize_examples(read_jsonl(cfg.train_path), tokenizer, cfg)
    lc = _engine_config(cfg, device)
    model = load_hf_model(cfg.model_dir, resolve_dtype(lc, device), cfg.gradient_checkpointing)
    pad_id = int(model.config.pad_token_id or 0)
    engine, _, optimizer = build_engine(model, lc, deepspeed_config(lc, world, device, group_size=1), device,
                                        lr_scheduler=warmup_schedule(cfg.warmup_steps))
    if rank == 0:
        print(f"[sft] optimizer: {optimizer_label(optimizer, device)}", flush=True)
    dev = next(engine.module.parameters()).device
    scale = deepspeed_loss_scale(1, world, scale_wrt_gas=False)
    losses = []
    for batch in update_plan(len(rows), cfg):
        mbs = plan_update(rows, batch, cfg.micro_batch_tokens, world)[rank]
        micro = [collate(rows, idx, pad_id) for idx in mbs]
        counts = torch.tensor([float(sum(mb.num_loss_tokens for mb in micro)), 0.0], dtype=torch.float64, device=dev)
        dist.all_reduce(counts)
        engine.train()
        for i, mb in enumerate(micro):
            engine.set_gradient_accumulation_boundary(i == len(micro) - 1)
            logits = engine(input_ids=mb.input_ids.to(dev), attention_mask=mb.attention_mask.to(dev),
                            use_cache=False).logits
            logp = logprobs_and_entropy(logits, mb.targets.to(dev), 1.0)[0]                       # (B, L)
            loss = -(logp * mb.loss_mask.to(dev)).sum() / counts[0].clamp(min=1)
            engine.backward(loss * scale, scale_wrt_gas=False)
            counts[1] += float(loss.detach())
        optimizer_step(engine, lc, device)
        total = counts[1:].clone()
        dist.all_reduce(total)
        losses.append(float(total))
        if rank == 0 and (len(losses) == 1 or len(losses) % 10 == 0):
            print(f"[sft] update {len(losses)}: loss {losses[-1]:.4f}", flush=True)
    summary = {"config": cfg.model_dump(), "examples": len(rows), "dropped": dropped, "updates": len(losses),
               "world": world, "losses": losses, "loss_first": losses[0], "loss_last": losses[-1],
               "seconds": time.monotonic() - start}
    _save(engine, cfg, out, summary, rank, lc.zero_stage)
    if world > 1:
        dist.barrier()
    return summary


def _save(engine, cfg: SftConfig, out: Path, summary: dict, rank: int, zero_stage: int) -> None:
    """Rank 0 writes the HF directory next to ``out`` and renames it into place (all ranks gather
    under ZeRO-3)."""
    state = cpu_state_dict(engine.module, zero_stage)
    if rank != 0:
        return
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    engine.module.save_pretrained(str(tmp), state_dict=state, safe_serialization=True)
    copy_tokenizer_files(cfg.model_dir, tmp)
    (tmp / "sft.json").write_text(json.dumps(summary, indent=1))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()
