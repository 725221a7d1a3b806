"""Reward throughput: our math reward vs bare math-verify, and code-sandbox executions per second.

    .venv/bin/python bench/reward_throughput.py                   # defaults, < 1 minute on 2 cores
    .venv/bin/python bench/reward_throughput.py --groups 32 --group-size 16 --repeats 9

Math. Both sides score the same responses against the same golds, in this process's thread as a
RewardWorker would call it:
  ours  rewards.math_reward.score_math_group on the full responses (~2 KB of reasoning each):
        answer-section split, last-\\boxed{} extraction, one JSON round trip per group to the
        math-verify subprocess, which parses the gold once, verifies each distinct answer under a
        timer, and falls back to the \\boxed{gold} form (Skywork-OR1);
  bare  math_verify.verify(parse("\\boxed{gold}"), parse("\\boxed{answer}")) per response, called
        directly on the same pre-extracted answer strings, no timeout (the cheapest possible call).
Two workloads: `distinct` (every answer in a group differs, so deduplication cannot help: the
fair per-call comparison) and `realistic` (RL groups repeat answers: 16 samples, ~4 distinct).
Each timed run uses fresh strings (a new seed), so math-verify's LRU caches are cold on both sides.
The ratio ours/bare is the figure of merit (target >= 0.9 on `distinct`).

Code. Sandbox executions per second: programs with one stdin/stdout test (a launcher per
program), and tests per second within one program (a fork per test; an assert test also forks its
judge, which calls the program over a socketpair).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FILLER = "We consider the constraints carefully and simplify the expression step by step. " * 25  # ~2 KB


def _answer_forms(rng: random.Random) -> tuple[str, list[str], list[str]]:
    """A gold answer, equivalent forms (correct), and distinct wrong answers."""
    kind = rng.randrange(4)
    if kind == 0:
        v = rng.randint(0, 999)
        return str(v), [str(v), f"{v}.0", f"0{v}"], [str(v + d) for d in range(1, 40)]
    if kind == 1:
        p, q = rng.randint(1, 30), rng.randint(31, 60)
        return rf"\frac{{{p}}}{{{q}}}", [rf"\frac{{{p}}}{{{q}}}", rf"\dfrac{{{p}}}{{{q}}}", f"{p}/{q}"], \
            [rf"\frac{{{p + d}}}{{{q}}}" for d in range(1, 40)]
    if kind == 2:
        a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 7])
        return rf"{a}\sqrt{{{b}}}", [rf"{a}\sqrt{{{b}}}", rf"\sqrt{{{a * a * b}}}"], \
            [rf"{a + d}\sqrt{{{b}}}" for d in range(1, 40)]
    v = rng.randint(-50, -1)
    return str(v), [str(v), f"({v})"], [str(v - d) for d in range(1, 40)]


def make_workload(seed: int, groups: int, n: int, distinct: bool) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(groups):
        gold, right, wrong = _answer_forms(rng)
        if distinct:  # every response a different answer string: no deduplication possible
            answers = (right + wrong)[:n]
            rng.shuffle(answers)
        else:         # a few distinct answers, repeated, as sampled groups look
            pool = right[:2] + wrong[:2]
            answers = [rng.choice(pool) for _ in range(n)]
        out.append((gold, [f"<think>{FILLER}</think> Therefore the answer is $\\boxed{{{a}}}$." for a in answers]))
    return out


def run_ours(workload, cfg, verifier) -> tuple[float, int]:
    from rewards.math_reward import score_math_group

    start, correct = time.perf_counter(), 0
    for gold, texts in workload:
        correct += sum(r.correct for r in score_math_group(texts, gold, cfg, verifier))
    return time.perf_counter() - start, correct


def run_bare(workload, extracted) -> tuple[float, int]:
    from math_verify import parse, verify

    start, correct = time.perf_counter(), 0
    for (gold, _), answers in zip(workload, extracted):
        for a in answers:
            g = parse("\\boxed{" + gold + "}", parsing_timeout=None)
            p = parse("\\boxed{" + a + "}", parsing_timeout=None)
            correct += bool(verify(g, p, timeout_seconds=None))
    return time.perf_counter() - start, correct


def bench_math(args) -> None:
    from rewards.config import RewardConfig
    from rewards.extract import extract_boxed_answer
    from rewards.math_verifier import MathVerifier

    cfg = RewardConfig()
    verifier = MathVerifier(cfg.math_timeout_s, cfg.math_kill_grace_s)
    verifier.start()
    n_resp = args.groups * args.group_size
    print(f"math: {args.groups} groups x {args.group_size} responses = {n_resp} per run, "
          f"median of {args.repeats} runs (fresh strings each)")
    print(f"{'workload':<11}{'ours /s':>10}{'bare /s':>10}{'ratio':>8}{'   agree'}")
    for distinct in (True, False):
        warm = make_workload(10_000 + distinct, 4, args.group_size, distinct)
        run_ours(warm, cfg, verifier)
        run_bare(warm, [[extract_boxed_answer(t).content for t in texts] for _, texts in warm])
        ours, bare, agree = [], [], True
        for r in range(args.repeats):
            wl = make_workload(r + 100 * distinct, args.groups, args.group_size, distinct)
            extracted = [[extract_boxed_answer(t).content for t in texts] for _, texts in wl]
            if r % 2:  # alternate who goes first, so drifting machine load biases neither side
                t_bare, c_bare = run_bare(wl, extracted)
                t_ours, c_ours = run_ours(wl, cfg, verifier)
            else:
                t_ours, c_ours = run_ours(wl, cfg, verifier)
                t_bare, c_bare = run_bare(wl, extracted)
            ours.append(n_resp / t_ours)
            bare.append(n_resp / t_bare)
            agree &= c_ours == c_bare
        ratio = statistics.median(ours) / statistics.median(bare)
        name = "distinct" if distinct else "realistic"
        print(f"{name:<11}{statistics.median(ours):>10.0f}{statistics.median(bare):>10.0f}{ratio:>8.2f}"
              f"   {'yes' if agree else 'NO (correct counts differ)'}")
    print(f"  (verifier restarts: {verifier.restarts})")
    verifier.close()


def bench_code(args) -> None:
    from rewards.sandbox import CodeTest, SandboxLimits, isolation_report, run_code, run_tests

    limits = SandboxLimits()
    print(f"\ncode sandbox (isolation: {', '.join(isolation_report(limits)) or 'none'})")
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    start = time.perf_counter()
    for i in range(args.programs):
        assert run_code(program, f"{i} 1\n", limits).stdout == f"{i + 1}\n"
    t = time.perf_counter() - start
    print(f"  programs, 1 stdio test each: {args.programs / t:7.1f} executions/s ({1000 * t / args.programs:.0f} ms each)")
    tests = [CodeTest("stdio", stdin=f"{i} 2\n") for i in range(args.tests)]
    start = time.perf_counter()
    runs = run_tests(program, tests, limits)
    t = time.perf_counter() - start
    assert all(r.success for r in runs)
    print(f"  one program, {args.tests} tests:     {args.tests / t:7.1f} tests/s ({1000 * t / args.tests:.1f} ms each)")
    square = "def f(x):\n    return x * x\n"
    asserts = [CodeTest("assert", code=f"assert f({i}) == {i * i}") for i in range(args.tests)]
    start = time.perf_counter()
    runs = run_tests(square, asserts, limits)
    t = time.perf_counter() - start
    assert all(r.success for r in runs)
    print(f"  one program, {args.tests} asserts:   {args.tests / t:7.1f} tests/s ({1000 * t / args.tests:.1f} ms each;"
          " judge process + calls over a socket)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--programs", type=int, default=20)
    ap.add_argument("--tests", type=int, default=50)
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # math-verify warns that its own timeout is disabled
    start = time.perf_counter()
    bench_math(args)
    bench_code(args)
    print(f"\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
