"""Build (or load from cache) the tiny world: tokenizer, Qwen2 model, task splits, warm-up.

    python -m launch.tiny.build            # build into .cache/tiny-world-s0 and print the summary

Everything is a function of the seed, so two builds give byte-identical files; the manifest
records their SHA-256 so a test can prove it. Builds are atomic (temp dir + rename) and
serialised with a file lock, so parallel test workers never see half a world.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

from launch.world_cache import World, default_cache_dir, ensure_built

BUILD_VERSION = 1  # bump when anything below changes what gets built


class TinyWorld(World):
    """The tiny world (arithmetic, 7-token answers)."""


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(out: Path, seed: int, max_warmup_steps: int, target_accuracy: float, log) -> dict:
    import torch

    from launch.tiny.model import init_tiny_model
    from launch.tiny.task import make_splits, write_jsonl
    from launch.tiny.tokenizer import train_tokenizer
    from launch.tiny.warmup import warm_up

    torch.set_num_threads(2)  # fixed thread count: the same float reductions on every machine
    t0 = time.monotonic()
    train, val = make_splits(seed)
    (out / "data").mkdir(parents=True)
    write_jsonl(train, out / "data" / "train.jsonl")
    write_jsonl(val, out / "data" / "val.jsonl")
    tok = train_tokenizer([p.prompt + p.solution for p in train], out / "model")
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
                      target_accuracy: float = 0.2, log=print) -> TinyWorld:
    """Return the cached world for these settings, building it first if needed."""
    name = f"tiny-world-v{BUILD_VERSION}-s{seed}-w{max_warmup_steps}-a{target_accuracy:g}"

    def build(tmp: Path) -> dict:
        log(f"[tiny] building the tiny world in {Path(cache_dir or default_cache_dir()) / name} (seed {seed}) ...")
        return _build(tmp, seed, max_warmup_steps, target_accuracy, log)

    root, manifest = ensure_built(name, build, cache_dir)
    if manifest is not None:
        log(f"[tiny] built in {manifest['build_seconds']}s; warm-up accuracy "
            f"{manifest['warmup']['accuracy']:.3f} after {manifest['warmup']['steps']} steps")
    return TinyWorld(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args()
    world = ensure_tiny_world(args.seed, args.cache_dir)
    print(json.dumps({"root": str(world.root), **world.manifest}, indent=2))


if __name__ == "__main__":
    main()
