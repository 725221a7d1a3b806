"""Build (or load from cache) the code world: tokenizer, Qwen2 model, verl-layout splits, warm-up.

    python -m launch.worlds code            # build into $LAGRL_CACHE/code-world-... and print the manifest

Deterministic for a seed (the manifest records the files' SHA-256), atomic and serialised through
``launch.worlds.cache``. After the warm-up the policy is measured with the real rewards on the
validation split (one sample per problem at τ=1: math-verify for the sums, the sandbox for the
programs), so the manifest says how often each kind is right where RL starts.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from launch.worlds.cache import World, ensure_world, sha256_file
from launch.worlds.code import CHAT_TEMPLATE, VOCAB_SIZE
from launch.worlds.code.model import init_code_model
from launch.worlds.code.task import make_splits
from launch.worlds.code.warmup import prompt_text, sample, warm_up
from launch.worlds.tokenizer import train_tokenizer
from rewards.problems import load_problems, write_jsonl
from rewards.scoring import score_group

BUILD_VERSION = 1  # bump when anything below changes what gets built


def measure(model, tok, items, path: Path, seed: int) -> dict:
    """Accuracy per kind under the run's own rewards (rewards.scoring: math-verify, the sandbox), on the
    problems as a run loads them from ``path`` (the verl rows of ``items``)."""
    problems = load_problems(path)
    assert [p.id for p in problems] == [f"{path.stem}-{i.id}" for i in items], "not the measured split"
    texts = sample(model, tok, items, seed)
    by_kind: dict[str, list[float]] = {}
    for text, item, problem in zip(texts, items, problems):
        result = score_group([text], problem.answer, problem.data_source)[0]
        by_kind.setdefault(item.kind, []).append(float(result.correct))
    out = {kind: round(sum(v) / len(v), 3) for kind, v in sorted(by_kind.items())}
    code = [x for kind, v in by_kind.items() if kind != "math" for x in v]
    out["code"] = round(sum(code) / len(code), 3)
    return out


def _build(out: Path, seed: int, max_warmup_steps: int, target_accuracy: float, log) -> dict:
    import torch


    torch.set_num_threads(2)  # fixed thread count: the same float reductions on every machine
    t0 = time.monotonic()
    splits = make_splits(seed)
    (out / "data").mkdir(parents=True)
    write_jsonl([i.row for i in splits.train], out / "data" / "train.jsonl")
    write_jsonl([i.row for i in splits.val], out / "data" / "val.jsonl")
    corpus = [CHAT_TEMPLATE] + [m["content"] for i in splits.warmup for m in i.messages] + \
             [i.solution for i in splits.warmup]
    tok = train_tokenizer(corpus, out / "model", vocab_size=VOCAB_SIZE, chat_template=CHAT_TEMPLATE)
    model = init_code_model(len(tok), tok.eos_token_id, seed)
    log(f"[code] tokenizer: {len(tok)} tokens; model: {sum(p.numel() for p in model.parameters()):,} params")
    result = warm_up(model, tok, splits.warmup, splits.val, seed=seed, target_accuracy=target_accuracy,
                     max_steps=max_warmup_steps, log=log)
    sampled = measure(model, tok, splits.val, out / "data" / "val.jsonl", seed + 1)
    log(f"[code] measured with the real rewards (one sample per validation problem, τ=1): {sampled}")
    model.generation_config.do_sample = True
    model.generation_config.top_k = None
    model.save_pretrained(out / "model", safe_serialization=True)
    lengths = [len(tok(prompt_text(tok, i) + i.solution, add_special_tokens=False)["input_ids"]) + 1
               for i in splits.val]
    files = ["model/tokenizer.json", "model/model.safetensors", "data/train.jsonl", "data/val.jsonl"]
    manifest = {
        "build_version": BUILD_VERSION, "seed": seed, "warmup": asdict(result), "sampled": sampled,
        "n_train": len(splits.train), "n_val": len(splits.val), "vocab_size": len(tok),
        "longest_prompt_plus_answer": max(lengths), "build_seconds": round(time.monotonic() - t0, 1),
        "sha256": {f: sha256_file(out / f) for f in files},
    }
    (out / "world.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def ensure_code_world(seed: int = 0, cache_dir: Path | None = None, *, max_warmup_steps: int = 1500,
                      target_accuracy: float = 0.2, log=print) -> World:
    """The cached code world for these settings, built first if needed (~20 s on idle cores)."""
    name = f"code-world-v{BUILD_VERSION}-s{seed}-w{max_warmup_steps}-a{target_accuracy:g}"
    world = ensure_world(name, lambda tmp: _build(tmp, seed, max_warmup_steps, target_accuracy, log), cache_dir, log)
    sampled = world.manifest["sampled"]
    log(f"[code] accuracy at τ=1 where RL starts: math {sampled['math']:.3f}, code {sampled['code']:.3f}")
    return world
