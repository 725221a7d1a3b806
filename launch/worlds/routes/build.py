"""Build (or load from cache) the routes world: tokenizer, Qwen2 model, task splits, warm-up, figures.

    python -m launch.worlds routes      # build into $LAGRL_CACHE/routes-world-... and print the manifest

Everything is a function of the seed, so two builds give byte-identical files; the manifest
records their SHA-256 so a test can prove it. Builds go through ``launch.worlds.cache.ensure_world``
(file lock, atomic rename). The manifest (``world.json``) also records, and the build prints when it
ends (``summary_lines``), what the warmed-up policy does when sampled on the validation problems with
transformers' ``generate`` (one sample each, no top-k/top-p): token entropy at τ 1.0 and 0.6,
accuracy, response-length percentiles per difficulty k, the fraction cut at each stage budget of the
``--routes`` scaling, and which routes it takes and how often each finishes correctly.

The slips world (``ensure_slips_world``, ``--slips``) is built here too: the same grammar, model and
steps, written by the slipping teacher (``task.SLIPS_TEACHER``) and warmed up for a fixed number of steps.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from launch.worlds.cache import World, ensure_world, sha256_file
from launch.worlds.reasoning.model import init_reasoning_model
from launch.worlds.reasoning.task import write_splits
from launch.worlds.routes import STAGE_BUDGETS
from launch.worlds.routes.sampling import sample_stats
from launch.worlds.routes.task import (
    make_splits,
    route_entropy_nats,
    ROUTES_TEACHER,
    sample_trace,
    SLIPS_TEACHER,
    Teacher,
)
from launch.worlds.routes.warmup import warm_up
from launch.worlds.tiny.build import VOCAB_SIZE
from launch.worlds.tokenizer import train_tokenizer

BUILD_VERSION = 1  # bump when anything below changes what gets built
SLIPS_BUILD_VERSION = 1     # the same for the slips world
SLIPS_WARMUP_STEPS = 2000   # measured: the separators' line accuracies part (0.85 after `,`, 0.46-0.49 after the others)
FILES = ("model/tokenizer.json", "model/model.safetensors", "data/train.jsonl", "data/val.jsonl")
CHECK_PROBLEMS = 80                   # the warm-up's stopping check: 10 validation problems of every k


def _line_figures(figures: dict) -> str:
    return ", ".join(f"{name.strip() or 'none'} {r['share']:.2f} (right {r['accuracy']:.2f})" for name, r in figures.items())


def summary_lines(m: dict) -> list[str]:
    """The figures of a built world, as printed after a build (the README quotes them)."""
    at_1, at_06 = m["sampled"]["tau_1.0"], m["sampled"]["tau_0.6"]
    cuts = " / ".join(f"{at_1['cut_at'][str(b)]:.2f}" for b in STAGE_BUDGETS)
    lines = [
        f" sampled with {m['sampler']} on {m['n_val']} validation problems:",
        f"   entropy (nats/token): τ=1.0 {at_1['mean_entropy']:.3f}   τ=0.6 {at_06['mean_entropy']:.3f}"
        f"   (SFT data's route choices: {m['data']['route_entropy_per_token']:.3f})",
        f"   accuracy: τ=1.0 {at_1['accuracy']:.3f}   τ=0.6 {at_06['accuracy']:.3f}",
        f"   cut at {' / '.join(map(str, STAGE_BUDGETS))} tokens (τ=1.0): {cuts}",
        "   length p10/p50/p90/max (τ=1.0): " + "/".join(str(at_1["length_quantiles"][q])
                                                     for q in ("p10", "p50", "p90", "max")),
        "   per k: length p10/p50/p90, accuracy (τ=1.0):",
    ]
    for k, q in at_1["length_by_k"].items():
        lines.append(f"     k={int(k):2d}: {q['p10']:3d}/{q['p50']:3d}/{q['p90']:3d}  acc {at_1['accuracy_by_k'][k]:.2f}")
    routes = ", ".join(f"{name} {r['share']:.2f} (acc {r['accuracy']:.2f})" for name, r in at_1["routes"].items())
    lines += [f"   routes taken (τ=1.0): {routes}",
              f"   additions written (τ=1.0): {_line_figures(at_1['forms'])}"]
    if "separators" in at_1:        # worlds built before these figures were recorded have none
        lines += [f"   additions after each separator (τ=1.0): {_line_figures(at_1['separators'])}",
                  f"   additions after each check word (τ=1.0): {_line_figures(at_1['after_check'])}"]
    lines.append(f"   warm-up {m['warmup']['steps']} steps ({m['warmup']['seconds']}s); build {m['build_seconds']}s")
    tag = f"[{m.get('teacher', 'routes')}]"         # the world's name: routes or slips
    return [tag + line for line in lines]


def _data_figures(train, tok, seed: int, teacher: Teacher) -> dict:
    """What the SFT data look like: response tokens per k and the entropy of their route choices per token."""
    rng = random.Random(seed)
    by_k: dict[int, list[int]] = {}
    for p in train[:3000]:
        by_k.setdefault(p.k, []).append(len(tok(sample_trace(p, rng, teacher))["input_ids"]) + 1)      # + EOS
    mean_tokens = {k: statistics.mean(v) for k, v in sorted(by_k.items())}
    return {"response_tokens_mean_by_k": {k: round(v, 1) for k, v in mean_tokens.items()},
            "route_entropy_per_token": round(sum(route_entropy_nats(k, teacher) for k in mean_tokens)
                                             / sum(mean_tokens.values()), 4)}


def _build(out: Path, seed: int, max_warmup_steps: int, target_accuracy: float | None, n_val: int, log,
           teacher: Teacher = ROUTES_TEACHER, checks: dict | None = None) -> dict:
    import torch


    torch.set_num_threads(2)  # fixed thread count: the same float reductions on every machine
    t0 = time.monotonic()
    train, val = make_splits(seed, n_val=n_val, teacher=teacher)
    write_splits(out, train, val)
    rng = random.Random(seed)
    tok = train_tokenizer([p.prompt + sample_trace(p, rng, teacher) for p in train[:2000]], out / "model",
                          vocab_size=VOCAB_SIZE)
    model = init_reasoning_model(len(tok), tok.eos_token_id, seed)     # the reasoning world's 4-layer Qwen2
    n_params = sum(p.numel() for p in model.parameters())
    log(f"[{teacher.name}] tokenizer: {len(tok)} tokens; model: {n_params:,} params")
    result = warm_up(model, tok, train, val[:CHECK_PROBLEMS], seed=seed, budgets=STAGE_BUDGETS,
                     target_accuracy=target_accuracy, max_steps=max_warmup_steps, teacher=teacher, log=log,
                     **(checks or {}))
    sampled = {f"tau_{tau}": asdict(sample_stats(model, tok, val, seed=seed, temperature=tau, budgets=STAGE_BUDGETS))
               for tau in (1.0, 0.6)}
    model.generation_config.do_sample = True
    model.generation_config.top_k = None
    model.save_pretrained(out / "model", safe_serialization=True)
    manifest = {
        "build_version": BUILD_VERSION, "teacher": teacher.name, "seed": seed, "n_params": n_params, "vocab_size": len(tok),
        "n_train": len(train), "n_val": len(val), "stage_budgets": list(STAGE_BUDGETS),
        "prompt_tokens_max": max(len(tok(p.prompt)["input_ids"]) for p in train[:2000] + val),
        "data": _data_figures(train, tok, seed, teacher),
        "warmup": asdict(result),
        "sampler": "transformers generate (one sample per problem, no top-k/top-p)",
        "sampled": sampled,
        "build_seconds": round(time.monotonic() - t0, 1),
        "sha256": {f: sha256_file(out / f) for f in FILES},
    }
    manifest = json.loads(json.dumps(manifest))          # int keys -> str, as every reader of world.json sees them
    (out / "world.json").write_text(json.dumps(manifest, indent=2))
    for line in summary_lines(manifest):
        log(line)
    return manifest


def ensure_routes_world(seed: int = 0, cache_dir: Path | None = None, *, max_warmup_steps: int = 1200,
                        target_accuracy: float = 0.3, n_val: int = 240, log=print) -> World:
    """The cached world for these settings, built first (printing its figures) if needed. A small n_val
    and max_warmup_steps make a quick build for tests."""
    name = f"routes-world-v{BUILD_VERSION}-s{seed}-w{max_warmup_steps}-a{target_accuracy:g}-v{n_val}"
    return ensure_world(name, lambda tmp: _build(tmp, seed, max_warmup_steps, target_accuracy, n_val, log),
                        cache_dir, log)


def ensure_slips_world(seed: int = 0, cache_dir: Path | None = None, *, max_warmup_steps: int = SLIPS_WARMUP_STEPS,
                       n_val: int = 240, log=print) -> World:
    """The slips world (``--slips``): the routes grammar written by a teacher whose rarer
    separators and check words make the next addition slip. Its warm-up runs a fixed number of steps
    (the teacher's slips, not the warm-up, hold accuracy at 20-50%), checked at steps 1000, 1500, 2000."""
    name = f"slips-world-v{SLIPS_BUILD_VERSION}-s{seed}-w{max_warmup_steps}-v{n_val}"
    checks = {"first_check": 1000, "check_every": 500}
    return ensure_world(name, lambda tmp: _build(tmp, seed, max_warmup_steps, None, n_val, log, SLIPS_TEACHER, checks),
                        cache_dir, log)
