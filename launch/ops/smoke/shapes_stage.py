"""Stage 6 (GPU): Qwen2.5-1.5B's shapes with random weights, the 152K-token vocabulary, 1024-token responses.

- generation: one engine (``GenerationActorImpl``, built as a run's actor builds it, engine core in its own
  process). First bare ``LLM.generate`` on it, then the actor's own path on the same prompts: prompts into
  Redis, the actor loop (admission, step-wise engine driving, log-prob capture, encoding, group write +
  ACK), groups read back as the learner reads them. Rewards are not scored (random weights answer nothing;
  a scorer that returns 0 keeps math-verify's CPU time out of the engine's figure). Tokens/s of each.
- weights: seconds per version through each transport into that engine, from tensors on the GPU.
- learner: ``RankEngine.train_update`` (ZeRO-2, bf16, activation checkpointing) against a bare DeepSpeed
  loop with the same config, model and micro-batches (summed cross-entropy over the same tokens):
  trained tokens/s of each and the peak GPU memory.

``size="small"`` keeps the vocabulary and shrinks the rest, to check this code on a CPU.
"""

from __future__ import annotations

import gc
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from actors.generation import GenerationActorImpl
from buffer import EmbeddedRedis, PromptMsg, RunBuffer
from launch.ops.smoke.context import Context, close_llm
from launch.ops.smoke.engine_stages import learner_weights, push
from launch.ops.smoke.learner_stage import init_single_rank, learner_config, optimizer_name, synthetic_rows
from launch.ops.smoke.report import require
from launch.worlds.shapes.build import build_tokenizer, qwen25_05b_config
from learner.batching import collate, plan_update
from learner.deepspeed_kit import bare_update, build_engine, load_hf_model
from learner.engine import RankEngine
from rewards.result import WRONG, RewardResult

# Qwen2.5-1.5B's published config (the rest as Qwen2.5-0.5B's: rope, norms, tied embeddings)
SHAPES = {"1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                       num_key_value_heads=2, max_window_layers=28),
          "small": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, max_window_layers=2)}


@dataclass(frozen=True)
class ShapesPlan:
    size: str = "1.5b"
    prompts: int = 16              # x n samples per prompt, each response_tokens long
    n: int = 8
    prompt_tokens: int = 64
    response_tokens: int = 1024
    rows: int = 16                 # rows per learner update (responses of response_tokens/2 .. response_tokens)
    updates: int = 3               # timed updates per side, after one warm-up
    micro_batch_tokens: int = 8192

    @classmethod
    def for_size(cls, size: str) -> ShapesPlan:
        if size == "small":
            return cls(size=size, prompts=4, n=2, prompt_tokens=16, response_tokens=32, rows=4, updates=1,
                       micro_batch_tokens=1024)
        return cls(size=size)


class Unscored:
    """Reward 0 for every response, not verified: the smoke measures the engine path, not math-verify."""

    def score_many(self, requests):
        return [[RewardResult(reward=0.0, reason=WRONG, extracted=None) for _ in r.texts] for r in requests]


def model_dir(ctx: Context, size: str) -> Path:
    """A random-weight model of the shapes (bf16) with the shapes world's 151,936-token tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM


    out = ctx.work / f"qwen2.5-{size}-shapes"
    if (out / "model.safetensors").exists() or (out / "model.safetensors.index.json").exists():
        return out
    build_tokenizer(out, seed=0)
    fields = {k: v for k, v in qwen25_05b_config().to_dict().items() if k != "layer_types"}   # re-derived
    config = Qwen2Config(**(fields | SHAPES[size]))
    torch.manual_seed(0)
    with torch.device(ctx.device):          # random init on the GPU: seconds instead of a minute
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    del model
    return out


def _prompts(plan: ShapesPlan, vocab: int, tag: str):
    import numpy as np


    rng = np.random.default_rng(0)
    return [PromptMsg(prompt_id=f"{tag}-{i}", data_source="tiny_arith", answer="0", n_samples=plan.n,
                      prompt_ids=rng.integers(10, vocab - 10, plan.prompt_tokens).astype(np.int32),
                      max_tokens=plan.response_tokens, step=0, min_version=0) for i in range(plan.prompts)]


def _bare(llm, prompts, top_p: float) -> tuple[int, float]:
    from vllm import SamplingParams

    p0 = prompts[0]
    params = SamplingParams(n=p0.n_samples, temperature=p0.temperature, top_p=top_p, max_tokens=p0.max_tokens,
                            logprobs=0)
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p.prompt_ids.tolist()} for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    return sum(len(c.token_ids) for o in outs for c in o.outputs), seconds


def _actor_path(impl, buf, prompts, timeout_s: float = 600.0) -> tuple[int, float]:
    """The actor's loop in a thread; prompts in through Redis, groups back out (take + ACK)."""
    loop = threading.Thread(target=impl.run, name="smoke-actor-loop", daemon=True)
    want, got, tokens = len(prompts), 0, 0
    t0 = time.perf_counter()
    loop.start()
    buf.put_prompts(prompts)
    try:
        while got < want:
            require(time.perf_counter() - t0 < timeout_s, f"{got}/{want} groups after {timeout_s:.0f} s")
            require(loop.is_alive(), f"the actor loop ended: {impl.stats.last_error}")
            batch = buf.take_groups("smoke-learner", count=want - got, block_ms=200)
            if batch:
                buf.ack_groups([e for e, _ in batch], [g.group_id for _, g in batch])
                tokens += sum(r.length for _, g in batch for r in g.responses)
                got += len(batch)
        return tokens, time.perf_counter() - t0
    finally:
        impl.stop()
        loop.join(60)


def generation_and_weights(ctx: Context, mdir: Path, plan: ShapesPlan) -> dict:
    kinds = ctx.smoke_transports()
    pairs = {k: ctx.transport_pair(k, f"smoke-shapes-{k}") for k in kinds}
    # the engine is built for the transport a GPU run picks (auto: the collective); another transport is
    # timed only where that engine serves it too
    host = "collective" if "collective" in kinds else kinds[0]
    host_kwargs = pairs[host][1].llm_kwargs()
    cfg = ctx.actor_config(max_model_len=plan.prompt_tokens + plan.response_tokens + 16,
                           max_prompts_in_flight=plan.prompts, gpu_memory_utilization=0.4)
    redis_dir = ctx.work / "shapes-redis"
    shutil.rmtree(redis_dir, ignore_errors=True)   # a reused --work keeps the last run's AOF: its prompt ids
    with EmbeddedRedis(redis_dir, stop_at_exit=True).start() as server:   # would be skipped as trained
        t0 = time.monotonic()
        impl = GenerationActorImpl("smoke-shapes-0", "smoke-shapes", server.url, str(mdir), cfg,
                                   group_size=plan.n, reward_scorer=Unscored(), transport=pairs[host][1])
        start_s = time.monotonic() - t0
        try:
            vocab = impl.llm.llm_engine.model_config.get_vocab_size()
            warm = replace(plan, prompts=2, n=2, response_tokens=min(16, plan.response_tokens))
            _bare(impl.llm, _prompts(warm, vocab, "warm"), cfg.top_p)
            bare_tokens, bare_s = _bare(impl.llm, _prompts(plan, vocab, "bare"), cfg.top_p)
            weights = learner_weights(ctx, str(mdir))
            nbytes = sum(t.numel() * t.element_size() for _, t in weights)
            update_s, version = {}, impl.version
            for kind in kinds:
                learner_side, actor_side = pairs[kind]
                if any(host_kwargs.get(k) != v for k, v in actor_side.llm_kwargs().items()):
                    ctx.notes.append(f"stage 6: {kind} not timed: it needs an engine built for its own "
                                     f"weight-transfer backend ({actor_side.llm_kwargs()})")
                    continue
                if kind != host:
                    actor_side.attach(f"smoke-shapes-{kind}", impl.llm)
                update_s[kind] = round(push(learner_side, actor_side, impl.llm, weights, version + 1, version), 2)
                version += 1
            del weights
            # last: the actor's loop shuts its engine down when it ends
            ours_tokens, ours_s = _actor_path(impl, RunBuffer.from_url(server.url, "smoke-shapes"),
                                              _prompts(plan, vocab, "actor"))
        finally:
            close_llm(impl.llm)
    gen = {"engine_start_s": round(start_s, 1), "bare_tokens_per_s": bare_tokens / bare_s,
           "actor_tokens_per_s": ours_tokens / ours_s, "ratio": (ours_tokens / ours_s) / (bare_tokens / bare_s),
           "bare_tokens": bare_tokens, "actor_tokens": ours_tokens, "enforce_eager": cfg.enforce_eager}
    return {"generation": gen, "weight_update_s": update_s, "weight_bytes": nbytes}


def learner_throughput(ctx: Context, mdir: Path, plan: ShapesPlan) -> dict:
    import torch


    init_single_rank(ctx.cuda)
    cfg = learner_config(ctx, 2, micro_batch_tokens=plan.micro_batch_tokens, gradient_checkpointing=True, lr=1e-6)
    sync = torch.cuda.synchronize if ctx.cuda else (lambda: None)

    def timed(step) -> list[float]:
        times = []
        for k in range(plan.updates + 1):
            sync()
            t = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t)
        return times[1:]                                 # the first is the warm-up

    def peak() -> float:
        return torch.cuda.max_memory_allocated() / 2**30 if ctx.cuda else float("nan")

    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    ours = RankEngine(cfg, str(mdir), 0, 1, ctx.device, group_size=plan.rows)
    rows = synthetic_rows(ours.vocab_size, plan.rows, plan.prompt_tokens, plan.response_tokens)
    mbs = plan_update(rows, list(range(len(rows))), cfg.micro_batch_tokens, 1, cfg.packs_on(ctx.device))[0]
    tokens = sum(r.loss_tokens for r in rows)
    ours_times = timed(lambda: ours.train_update(rows, mbs, ours.version, cfg.loss, 1.0, 0.0, required_lag=None))
    optimizer, ds_config, dtype, attention = optimizer_name(ours.engine), ours.ds_config, ours.dtype, ours.attention
    ours_peak = peak()
    # ZeRO's gradient hooks live in autograd's C++ nodes, out of the garbage collector's sight: without
    # destroy() the engine outlives its last reference and the bare engine has to fit beside it
    ours.engine.destroy()
    ours = None
    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = load_hf_model(str(mdir), dtype, True, attention)             # the same rows' layout as ours
    bare, *_ = build_engine(model, cfg, ds_config, ctx.device)          # the same optimizer as ours
    collated = [collate(rows, idx, packed=cfg.packs_on(ctx.device)) for idx in mbs]
    bare_times = timed(lambda: bare_update(bare, collated, tokens))
    bare_peak = peak()
    bare.destroy()
    bare = model = None
    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()
    ours_tps, bare_tps = tokens / statistics.median(ours_times), tokens / statistics.median(bare_times)
    return {"tokens_per_update": tokens, "micro_batches": len(mbs), "optimizer": optimizer,
            "ours_tokens_per_s": ours_tps, "bare_tokens_per_s": bare_tps, "ratio": ours_tps / bare_tps,
            "ours_peak_gib": round(ours_peak, 1), "bare_peak_gib": round(bare_peak, 1)}


def shapes_stage(ctx: Context, size: str) -> dict:
    plan = ShapesPlan.for_size(size)
    t0 = time.monotonic()
    ctx.ensure_ray()
    mdir = model_dir(ctx, size)
    build_s = time.monotonic() - t0
    gw = generation_and_weights(ctx, mdir, plan)
    learn = learner_throughput(ctx, mdir, plan)
    g = gw["generation"]
    updates = ", ".join(f"{k} {v:.2f} s" for k, v in gw["weight_update_s"].items())
    name = "Qwen2.5-1.5B shapes" if size == "1.5b" else "small shapes, 152K vocabulary"
    peak = f", peak {learn['ours_peak_gib']} GiB (bare {learn['bare_peak_gib']})" if ctx.cuda else ""
    line = (f"{name} ({gw['weight_bytes'] / 2**30:.2f} GiB {ctx.engine_dtype}), {plan.prompts}x{plan.n} x "
            f"{plan.response_tokens} tokens: engine {g['actor_tokens_per_s']:.0f} tokens/s via the actor vs "
            f"{g['bare_tokens_per_s']:.0f} bare LLM.generate (x{g['ratio']:.2f}, eager {g['enforce_eager']}, "
            f"start {g['engine_start_s']:.0f} s); weight update {updates}; learner "
            f"{learn['ours_tokens_per_s']:.0f} trained tokens/s vs {learn['bare_tokens_per_s']:.0f} bare DeepSpeed "
            f"(x{learn['ratio']:.2f}, {learn['optimizer']}{peak})")
    return {"line": line, "size": size, "model_build_s": round(build_s, 1), **gw, "learner": learn,
            "plan": plan.__dict__}
