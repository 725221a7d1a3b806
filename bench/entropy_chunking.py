"""Micro-benchmark: chunked vs naive log-prob + entropy (forward + backward) at a 152K vocabulary,
beside the bare loop's loss (torch's cross-entropy on fp32 logits, what ``bare_update`` trains with).

    .venv/bin/python bench/entropy_chunking.py                       # B=1, L=1024 and 2048, CPU fp32
    .venv/bin/python bench/entropy_chunking.py --grads logp --variants chunked bare   # the learner's usual case
    .venv/bin/python bench/entropy_chunking.py --seq-lens 4096 --chunk-size 512 --dtype bfloat16
    .venv/bin/python bench/entropy_chunking.py --device cuda --seq-lens 16384 --dtype bfloat16

Each (variant, L) runs in its own subprocess so peak memory is clean: on CPU the peak resident
set (getrusage ru_maxrss, which never misses a short spike) minus the resident set after the
inputs are allocated; on CUDA torch.cuda.max_memory_allocated minus the allocation after the
inputs. Both variants pay the (B, L, V) logits and their gradient; the difference is what each
keeps for backward (naive: fp32 log-softmax and softmax copies; chunked: one (B, L) vector)
and its transient buffers. Time is the best of ``--repeats`` forward+backward runs.

``--grads logp`` backpropagates through the log-probs only: the learner's case whenever the entropy
bonus is off (the entropy is then a metric, detached). ``both`` adds a gradient through the entropy.
``bare`` is ``F.cross_entropy`` on the upcast logits: it computes no entropy, so chunked / bare is
what the learner's loss costs over the reference loop's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(args: argparse.Namespace) -> None:
    import resource

    import torch

    sys.path.insert(0, ROOT)
    from learner.logprobs import logprobs_and_entropy, naive_logprobs_and_entropy

    torch.manual_seed(0)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    B, L, V = args.batch, args.seq_len, args.vocab
    logits = torch.randn(B, L, V, device=dev, dtype=dtype).requires_grad_(True)    # (B, L, V)
    targets = torch.randint(0, V, (B, L), device=dev)                               # (B, L)
    w_lp, w_h = torch.randn(B, L, device=dev), torch.randn(B, L, device=dev)

    def run() -> None:
        if args.variant == "bare":
            flat = logits.flatten(0, 1).float() / args.temperature
            torch.nn.functional.cross_entropy(flat, targets.flatten(), reduction="sum").backward()
            logits.grad = None
            return
        if args.variant == "chunked":
            logp, ent = logprobs_and_entropy(logits, targets, args.temperature, args.chunk_size)
        else:
            logp, ent = naive_logprobs_and_entropy(logits, targets, args.temperature)
        objective = (logp * w_lp).sum()
        (objective + (ent * w_h).sum() if args.grads == "both" else objective).backward()
        logits.grad = None

    def rss_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    sync()
    base = torch.cuda.memory_allocated() / 2**20 if dev.type == "cuda" else rss_mb()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else rss_mb()
    print(json.dumps({"time_s": min(times), "base_mb": base, "peak_mb": peak, "extra_mb": peak - base,
                      "logits_mb": logits.numel() * logits.element_size() / 2**20}))


def parent(args: argparse.Namespace) -> None:
    print(f"device={args.device} dtype={args.dtype} B={args.batch} V={args.vocab} "
          f"chunk={args.chunk_size} tau={args.temperature} repeats={args.repeats} grads={args.grads}")
    print(f"{'L':>6} {'variant':>8} {'time ms':>8} {'extra MB':>9} {'peak MB':>9} {'logits MB':>9}")
    for L in args.seq_lens:
        res = {}
        for variant in args.variants:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--variant", variant,
                   "--seq-len", str(L), "--batch", str(args.batch), "--vocab", str(args.vocab),
                   "--chunk-size", str(args.chunk_size), "--dtype", args.dtype, "--device", args.device,
                   "--temperature", str(args.temperature), "--repeats", str(args.repeats), "--grads", args.grads]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{L:>6} {variant:>8} failed (rc {out.returncode}): {out.stderr.strip()[-300:]}")
                continue
            r = res[variant] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{L:>6} {variant:>8} {r['time_s'] * 1e3:>8.1f} {r['extra_mb']:>9.0f} {r['peak_mb']:>9.0f} "
                  f"{r['logits_mb']:>9.0f}")
        if {"chunked", "naive"} <= res.keys():
            c, n = res["chunked"], res["naive"]
            print(f"{L:>6}    ratio naive/chunked: time x{n['time_s'] / c['time_s']:.2f}, "
                  f"extra memory x{n['extra_mb'] / max(c['extra_mb'], 1.0):.2f}")
        if {"chunked", "bare"} <= res.keys():
            c, b = res["chunked"], res["bare"]
            print(f"{L:>6}    ratio chunked/bare: time x{c['time_s'] / b['time_s']:.2f}, "
                  f"extra memory x{c['extra_mb'] / max(b['extra_mb'], 1.0):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--vocab", type=int, default=152064, help="Qwen2.5 padded vocabulary")
    p.add_argument("--chunk-size", type=int, default=128)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--variants", nargs="+", default=["chunked", "naive"], choices=["chunked", "naive", "bare"])
    p.add_argument("--grads", default="both", choices=["both", "logp"],
                   help="gradient through log-probs and entropy, or the log-probs only (entropy bonus off)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="chunked", help=argparse.SUPPRESS)
    p.add_argument("--seq-len", type=int, default=1024, help=argparse.SUPPRESS)
    args = p.parse_args()
    child(args) if args.child else parent(args)


if __name__ == "__main__":
    main()
