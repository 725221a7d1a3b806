"""Learner train-path throughput: packed vs padded micro-batches, each against a bare DeepSpeed loop.

    .venv/bin/python bench/learner_throughput.py                         # tiny world model, a tiny run's update
    .venv/bin/python bench/learner_throughput.py --shape long-tail --hidden 256 --layers 4 --vocab 8192
    .venv/bin/python bench/learner_throughput.py --shape small-batches   # 32 longer rows, 1024-token micro-batches
    .venv/bin/python bench/learner_throughput.py --device cuda --shape long-tail --hidden 1536 --layers 28 --vocab 151936

"ours" = ``RankEngine.train_update``: collate, chunked log-prob + entropy from logits / tau,
token-level clipped PPO loss with global token normalisation, hand-set accumulation boundary,
DeepSpeed backward + step (clip 1.0, AdamW), once with ``learner.packing`` on (the rows of a
micro-batch end to end, micro-batches filled to a budget of real tokens) and once off (rows padded to
the micro-batch's longest). "bare" = the same DeepSpeed config, model and micro-batches of the same
layout (collated once, up front) with a summed cross-entropy over the same response tokens / T (in
fp32 under ZeRO-0 ours clips the gradient itself and DeepSpeed's clipping is off, so bare does not
clip: ~0.3 ms of ours). All run in this process as a one-rank gloo (or nccl) group. ``--rounds``
paired rounds, each ``--updates`` updates of every side interleaved (the order rotates) so load from
other processes hits them alike; each figure is the median over the rounds of a per-round ratio of
median update times, with its spread (``bench/paired.py``). Throughput = useful (response, non-pad)
tokens per second. Printed: packed/padded (ours), and ours/bare for each layout.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.paired import ROUNDS, ratio_line  # noqa: E402

# One update's shape. ``tiny-run``: what ``--tiny`` trains in an update, D_R 32 groups x 16 responses, the
# tiny world's 3-5 token prompts, responses of 6-12 tokens (its runs average ~7, at most 11-16) and its
# 4096-token micro-batches (``launch.worlds.tiny.scale``): 2 micro-batches. ``small-batches``: the
# bench's default until 2026-11-28, 32 responses of 32-64 tokens in 1024-token micro-batches (3), where
# the per-micro-batch overhead (metrics, small ops) weighs ~4x more per token than in a tiny run.
# ``long-tail``: a reasoning run's lengths at a 1024-token budget, drawn log-normal with the median at a third
# of the budget and a tail to it (clipped to [8, budget]), 64 rows in 8192-token micro-batches.
SHAPES = {
    "tiny-run": {"rows": 512, "prompt_len": 5, "seq_len": 12, "micro_batch_tokens": 4096, "lengths": "uniform"},
    "small-batches": {"rows": 32, "prompt_len": 16, "seq_len": 64, "micro_batch_tokens": 1024, "lengths": "uniform"},
    "long-tail": {"rows": 64, "prompt_len": 32, "seq_len": 1024, "micro_batch_tokens": 8192, "lengths": "long-tail"},
}


def response_lengths(rng, args) -> list[int]:
    """uniform: in [seq_len / 2, seq_len]; long-tail: log-normal, median seq_len / 3, clipped to [8, seq_len]."""
    if args.lengths == "long-tail":
        drawn = rng.lognormal(mean=math.log(args.seq_len / 3), sigma=0.6, size=args.rows)
        return [int(n) for n in drawn.clip(8, args.seq_len)]
    return [int(n) for n in rng.integers(args.seq_len // 2, args.seq_len + 1, args.rows)]


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=0, help="build a Qwen2 in memory with this width (0 = tiny world model)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny-run",
                    help="the update's rows, lengths and micro-batch budget (SHAPES); the flags below override it")
    ap.add_argument("--rows", type=int, default=None, help="responses per mini-batch (one update)")
    ap.add_argument("--prompt-len", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=None, help="max response length (lengths uniform in [len/2, len])")
    ap.add_argument("--micro-batch-tokens", type=int, default=None)
    ap.add_argument("--lengths", choices=("uniform", "long-tail"), default=None, help="how response lengths are drawn")
    ap.add_argument("--updates", type=int, default=6, help="timed updates per side in each round")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="paired rounds; the median ratio and its spread count")
    ap.add_argument("--entropy-coef", type=float, default=1e-3, help="alpha > 0 also backprops the entropy")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads on CPU (0 = torch default)")
    ap.add_argument("--no-freeze", action="store_true", help="leave the start-up heap to full garbage collections "
                    "(what the learner rank did before actors.cluster.heap)")
    args = ap.parse_args()
    for key, value in SHAPES[args.shape].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def model_dir(args: argparse.Namespace, tmp: str) -> tuple[str, int]:
    if not args.hidden:
        import json

        from launch.worlds.tiny.build import ensure_tiny_world
        d = ensure_tiny_world().model_dir
        return str(d), json.loads((d / "config.json").read_text())["vocab_size"]
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    heads = max(1, args.hidden // 64)
    cfg = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads,
                      head_dim=args.hidden // heads, max_position_embeddings=4096, tie_word_embeddings=True,
                      pad_token_id=0, eos_token_id=1, bos_token_id=1)
    Qwen2ForCausalLM(cfg).save_pretrained(tmp)
    return tmp, args.vocab


SIDES = ("ours packed", "bare packed", "ours padded", "bare padded")


def main() -> None:
    args = parse()
    import numpy as np
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    from learner.deepspeed_kit import bare_update, build_engine, init_distributed, load_hf_model

    init_distributed(args.device)                 # one rank on a free loopback port
    from learner.batching import Row, collate, plan_update
    from learner.config import BatchConfig
    from learner.engine import RankEngine
    from learner.trainer_config import LearnerConfig

    tmp = tempfile.mkdtemp(prefix="lagrl-bench-")
    mdir, vocab = model_dir(args, tmp)
    rng = np.random.default_rng(0)
    rows = [Row(prompt_ids=rng.integers(2, vocab, args.prompt_len).astype(np.int32),
                response_ids=rng.integers(2, vocab, n).astype(np.int32),
                old_logprobs=np.full(n, -np.log(vocab), np.float32), advantage=float(rng.normal()),
                version_start=0, version_end=0, group_index=0)
            for n in response_lengths(rng, args)]
    tokens = sum(r.loss_tokens for r in rows)
    steps, shapes = {}, {}
    for layout in ("packed", "padded"):
        cfg = LearnerConfig(lr=1e-5, batch=BatchConfig(rollout_batch=1, mini_batch=1), device=args.device,
                            micro_batch_tokens=args.micro_batch_tokens, packing="on" if layout == "packed" else "off")
        ours = RankEngine(cfg, mdir, 0, 1, args.device, group_size=args.rows)   # one group of all rows
        bare_model = load_hf_model(mdir, next(ours.engine.module.parameters()).dtype, False, ours.attention)
        bare, *_ = build_engine(bare_model, cfg, ours.ds_config, args.device)   # the same optimizer as ours
        mbs = plan_update(rows, list(range(len(rows))), args.micro_batch_tokens, 1, cfg.packs_on(args.device))[0]
        collated = [collate(rows, idx, packed=cfg.packs_on(args.device)) for idx in mbs]
        steps[f"ours {layout}"] = (lambda o=ours, m=mbs, c=cfg: o.train_update(rows, m, o.version, c.loss, 1.0,
                                                                              args.entropy_coef, required_lag=None))
        steps[f"bare {layout}"] = lambda b=bare, c=collated: bare_update(b, c, tokens)
        shapes[layout] = (len(mbs), sum(mb.input_ids.numel() for mb in collated if mb.packed is None)
                          or sum(mb.packed.input_ids.numel() for mb in collated))

    def timed(fn) -> float:
        if args.device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if args.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    for side in SIDES:
        steps[side]()                                 # warm-up: allocator, optimizer state
    from actors.cluster.heap import freeze_startup_heap
    if not args.no_freeze:
        freeze_startup_heap()                         # as a learner rank does once its engine is built
    print(f"model {mdir}, vocab {vocab}, {len(rows)} rows, {tokens} loss tokens/update "
          f"(responses: median {int(np.median([r.loss_tokens for r in rows]))}, max {max(r.loss_tokens for r in rows)}), "
          f"packed {shapes['packed'][0]} micro-batches / {shapes['packed'][1]} tokens read, padded "
          f"{shapes['padded'][0]} / {shapes['padded'][1]}, threads {torch.get_num_threads()}, device {args.device}",
          flush=True)
    ratios: dict[str, list[float]] = {"packed/padded": [], "packed ours/bare": [], "padded ours/bare": []}
    for rnd in range(args.rounds):
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        for k in range(args.updates):
            order = SIDES[k % len(SIDES):] + SIDES[:k % len(SIDES)]       # rotated: no side always first
            for side in order:
                times[side].append(timed(steps[side]))
        med = {side: statistics.median(v) for side, v in times.items()}
        ratios["packed/padded"].append(med["ours padded"] / med["ours packed"])
        ratios["packed ours/bare"].append(med["bare packed"] / med["ours packed"])
        ratios["padded ours/bare"].append(med["bare padded"] / med["ours padded"])
        print(f"round {rnd}: " + ", ".join(f"{side} {tokens / med[side]:7.0f} tok/s ({med[side] * 1e3:.0f} ms)"
                                           for side in SIDES), flush=True)
    print(ratio_line("learner packed/padded (useful tokens/s)", ratios["packed/padded"], target=1.5))
    print(ratio_line("learner/bare DeepSpeed, packed (useful tokens/s)", ratios["packed ours/bare"]))
    print(ratio_line("learner/bare DeepSpeed, padded (useful tokens/s)", ratios["padded ours/bare"]))


if __name__ == "__main__":
    main()
