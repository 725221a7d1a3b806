"""Build (or load from cache) the tiny world: tokenizer, Qwen2 model, task splits, warm-up.

    python -m launch.worlds tiny            # build into $LAGRL_CACHE/tiny-world-v1-s0-... and print the manifest

Everything is a function of the seed (byte-identical builds, SHA-256 in the manifest), built once
through ``launch.worlds.cache``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from launch.worlds.cache import World, ensure_world, sha256_file
from launch.worlds.tiny.model import init_tiny_model
from launch.worlds.tiny.task import make_splits, write_jsonl
from launch.worlds.tiny.warmup import warm_up
from launch.worlds.tokenizer import train_tokenizer

BUILD_VERSION = 1  # bump when anything below changes what gets built
VOCAB_SIZE = 320   # the BPE vocabulary (launch.worlds.tokenizer); the reasoning world's too


def _build(out: Path, seed: int, max_warmup_steps: int, target_accuracy: float, log) -> dict:
    import torch


    torch.set_num_threads(2)  # fixed thread count: the same float reductions on every machine
    t0 = time.monotonic()
    train, val = make_splits(seed)
    (out / "data").mkdir(parents=True)
    write_jsonl(train, out / "data" / "train.jsonl")
    write_jsonl(val, out / "data" / "val.jsonl")
    tok = train_tokenizer([p.prompt + p.solution for p in train], out / "model", vocab_size=VOCAB_SIZE)
    model = init_tiny_model(len(tok), tok.eos_token_id, seed)
    log(f"[tiny] tokenizer: {len(tok)} tokens; model: {sum(p.numel() for p in model.parameters()):,} params")
    result = warm_up(model, tok, train, val, seed=seed, target_accuracy=target_accuracy,
                     max_steps=max_warmup_steps, log=log)
    model.generation_config.do_sample = True
    model.generation_config.top_k = None
    model.save_pretrained(out / "model", safe_serialization=True)
    files = ["model/tokenizer.json", "model/model.safetensors", "data/train.jsonl", "data/val.jsonl"]
    manifest = {
        "build_version": BUILD_VERSION, "seed": seed, "warmup": asdict(result),
        "n_train": len(train), "n_val": len(val), "vocab_size": len(tok),
        "build_seconds": round(time.monotonic() - t0, 1),
        "sha256": {f: sha256_file(out / f) for f in files},
    }
    (out / "world.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def ensure_tiny_world(seed: int = 0, cache_dir: Path | None = None, *, max_warmup_steps: int = 1500,
                      target_accuracy: float = 0.2, log=print) -> World:
    """The cached tiny world for these settings, built first if needed (~20 s)."""
    name = f"tiny-world-v{BUILD_VERSION}-s{seed}-w{max_warmup_steps}-a{target_accuracy:g}"
    return ensure_world(name, lambda tmp: _build(tmp, seed, max_warmup_steps, target_accuracy, log), cache_dir, log)
