"""Build (or load from cache) the reasoning world: tokenizer, Qwen2 model, task splits, warm-up.

    python -m launch.worlds reasoning     # build into $LAGRL_CACHE/reasoning-world-... and print the manifest

From nothing it takes ~2 minutes on 2 CPU cores (110 s measured; the warm-up stops after 300 steps).

Everything is a function of the seed, so two builds give byte-identical files; the manifest
records their SHA-256 so a test can prove it. Builds go through ``launch.worlds.cache.ensure_world``
(file lock, atomic rename), so parallel test workers never see half a world. The manifest also
records what the warmed-up policy does when sampled (accuracy, truncation at each stage budget,
response lengths, token entropy at τ 1.0 and 0.6), the figures presets are tuned from.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from launch.worlds.cache import World, ensure_world, sha256_file
from launch.worlds.reasoning import STAGE_BUDGETS
from launch.worlds.reasoning.model import init_reasoning_model
from launch.worlds.reasoning.sampling import sample_stats
from launch.worlds.reasoning.task import make_splits, write_splits
from launch.worlds.reasoning.warmup import Encoder, warm_up
from launch.worlds.tiny.build import VOCAB_SIZE
from launch.worlds.tokenizer import train_tokenizer

BUILD_VERSION = 1  # bump when anything below changes what gets built
FILES = ("model/tokenizer.json", "model/model.safetensors", "data/train.jsonl", "data/val.jsonl")


def _length_summary(lengths: list[int]) -> dict:
    qs = statistics.quantiles(lengths, n=10, method="inclusive")
    return {"min": min(lengths), "p10": round(qs[0]), "p50": round(qs[4]), "p90": round(qs[8]),
            "max": max(lengths), **{f"over_{b}": round(sum(n > b for n in lengths) / len(lengths), 4)
                                    for b in STAGE_BUDGETS}}


def _build(out: Path, seed: int, max_warmup_steps: int, target_accuracy: float, n_val: int, log) -> dict:
    import torch


    torch.set_num_threads(2)  # fixed thread count: the same float reductions on every machine
    t0 = time.monotonic()
    train, val = make_splits(seed, n_val=n_val)
    write_splits(out, train, val)
    tok = train_tokenizer([p.prompt + p.solution for p in train[:2000]], out / "model", vocab_size=VOCAB_SIZE)
    model = init_reasoning_model(len(tok), tok.eos_token_id, seed)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"[reasoning] tokenizer: {len(tok)} tokens; model: {n_params:,} params")
    result = warm_up(model, tok, train, val, seed=seed, target_accuracy=target_accuracy,
                     max_steps=max_warmup_steps, log=log)
    at_1 = result.checks[-1] if result.checks else asdict(sample_stats(model, tok, val, seed=seed, temperature=1.0))
    at_06 = asdict(sample_stats(model, tok, val, seed=seed, temperature=0.6))
    log(f"[reasoning] τ=0.6: acc {at_06['accuracy']:.3f}  entropy {at_06['mean_entropy']:.3f}")
    model.generation_config.do_sample = True
    model.generation_config.top_k = None
    model.save_pretrained(out / "model", safe_serialization=True)
    enc = Encoder(tok)
    manifest = {
        "build_version": BUILD_VERSION, "seed": seed, "n_params": n_params, "vocab_size": len(tok),
        "n_train": len(train), "n_val": len(val),
        "gold_response_tokens": _length_summary([len(enc(p)[1]) for p in val]),
        "prompt_tokens_max": max(len(enc(p)[0]) for p in train + val),
        "warmup": asdict(result),
        "sampled": {"tau_1.0": {k: v for k, v in at_1.items() if k not in ("step", "gold_trace_prob")},
                    "tau_0.6": at_06},
        "build_seconds": round(time.monotonic() - t0, 1),
        "sha256": {f: sha256_file(out / f) for f in FILES},
    }
    (out / "world.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def ensure_reasoning_world(seed: int = 0, cache_dir: Path | None = None, *, max_warmup_steps: int = 1500,
                           target_accuracy: float = 0.25, n_val: int = 256, log=print) -> World:
    """Return the cached world for these settings, building it first if needed (a small n_val and
    max_warmup_steps make a quick build for tests: every figure is then measured on n_val problems)."""
    name = (f"reasoning-world-v{BUILD_VERSION}-s{seed}-w{max_warmup_steps}-a{target_accuracy:g}"
            + (f"-v{n_val}" if n_val != 256 else ""))
    return ensure_world(name, lambda tmp: _build(tmp, seed, max_warmup_steps, target_accuracy, n_val, log),
                        cache_dir, log)
