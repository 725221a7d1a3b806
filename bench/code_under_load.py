"""Sandbox throughput through the Ray reward pool, idle and while a vLLM engine generates beside it.

    .venv/bin/python bench/code_under_load.py                 # ~3 min on 2 cores (builds the code world once)
    .venv/bin/python bench/code_under_load.py --groups 16 --rounds 3

The work is a run's: groups of ``--group-size`` programs from the code world's validation problems
(its one-line functions and stdin programs, three tests each; half of them wrong), scored by a
``rewards.workers.RewardPool`` of ``--workers`` Ray actors exactly as generation actors submit them
(one request per group). It is timed idle, then while a vLLM engine on the code world's model (its own
process, as an actor's engine) generates continuously at the run's settings, then idle again:
programs/s for each, and the engine's tokens/s alone and with the sandbox beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENGINE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from actors.config import ActorConfig
from actors.engine import build_llm
cfg = ActorConfig(num_actors=1, max_model_len=128, max_prompts_in_flight=64, num_gpus=0.0, dtype="float32",
                  enforce_eager=True, cpu_kv_cache_gib=1)
llm = build_llm(cfg, {model!r}, 0, max_num_seqs=128)
from vllm import SamplingParams
params = SamplingParams(n=8, temperature=1.0, max_tokens=32, ignore_eos=True)
prompts = [{{"prompt_token_ids": ids}} for ids in {prompts!r}]
deadline = time.monotonic() + {seconds}
while time.monotonic() < deadline:
    t = time.monotonic()
    out = llm.generate(prompts, params, use_tqdm=False)
    n = sum(len(c.token_ids) for o in out for c in o.outputs)
    print(json.dumps({{"t": time.time(), "tokens": n, "seconds": time.monotonic() - t}}), flush=True)
"""


def workload(world, group_size: int, groups: int, seed: int):
    """ScoreRequests: per group one code problem, half the programs right, half off by one."""
    from rewards.problems import load_problems
    from rewards.result import ScoreRequest

    rows = [json.loads(line) for line in world.val_path.read_text().splitlines()]
    items = {row["extra_info"]["index"]: row for row in rows}
    problems = [p for p in load_problems(world.val_path) if p.data_source.startswith("code")]
    rng = random.Random(seed)
    requests = []
    for _ in range(groups):
        p = rng.choice(problems)
        program = items[p.id.removeprefix("val-")]["extra_info"]["solution"]
        wrong = program.replace("+", "-", 1) if "+" in program else program + "+1"
        texts = [f"```python\n{program if i % 2 == 0 else wrong}\n```" for i in range(group_size)]
        requests.append(ScoreRequest(texts, p.answer, p.data_source))
    return requests


def programs_per_s(pool, requests) -> tuple[float, int]:
    start = time.perf_counter()
    results = pool.score_groups(requests)
    seconds = time.perf_counter() - start
    correct = sum(r.correct for group in results for r in group)
    return sum(len(r.texts) for r in requests) / seconds, correct


def engine_process(world, seconds: float, log_path: Path) -> subprocess.Popen:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world.model_dir)
    rows = [json.loads(line) for line in world.val_path.read_text().splitlines()][:16]
    texts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    code = ENGINE.format(root=str(ROOT), model=str(world.model_dir), prompts=prompts, seconds=seconds)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-c", code], stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            env=env, cwd=ROOT)


def engine_rounds(log_path: Path) -> list[dict]:
    rows = []
    for line in log_path.read_text().splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=12, help="groups per timed round")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2, help="RewardWorker actors")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per condition (median reported)")
    ap.add_argument("--engine-seconds", type=float, default=150.0, help="how long the engine generates")
    args = ap.parse_args()

    import ray

    from launch.worlds.code.build import ensure_code_world
    from rewards.config import RewardConfig
    from rewards.workers import RewardPool

    world = ensure_code_world()
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, 4), include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False)
    pool = RewardPool(args.workers, RewardConfig(num_workers=args.workers))
    per_round = args.groups * args.group_size
    print(f"reward pool: {args.workers} workers; {args.groups} groups x {args.group_size} programs per round "
          f"(3 tests each), median of {args.rounds} rounds")
    programs_per_s(pool, workload(world, args.group_size, 2, seed=999))           # warm the workers
    idle = [programs_per_s(pool, workload(world, args.group_size, args.groups, seed=r))[0] for r in range(args.rounds)]

    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"code-under-load-engine-{os.getpid()}.log"
    engine = engine_process(world, args.engine_seconds, log_path)
    try:
        while len(engine_rounds(log_path)) < 2:             # the engine is up and generating steadily
            if engine.poll() is not None:
                raise RuntimeError(f"engine exited: {log_path.read_text()[-2000:]}")
            time.sleep(1)
        alone_rounds = engine_rounds(log_path)
        t0 = time.time()
        busy = [programs_per_s(pool, workload(world, args.group_size, args.groups, seed=10 + r))[0]
                for r in range(args.rounds)]
        t1 = time.time()
        time.sleep(1)
        beside = [r for r in engine_rounds(log_path) if r["t"] - r["seconds"] >= t0 and r["t"] <= t1]
    finally:
        engine.terminate()
        engine.wait(timeout=60)
    after = [programs_per_s(pool, workload(world, args.group_size, args.groups, seed=20 + r))[0]
             for r in range(args.rounds)]
    pool.shutdown()
    ray.shutdown()

    def tok_s(rounds):
        if not rounds:
            return float("nan")
        return sum(r["tokens"] for r in rounds) / max(sum(r["seconds"] for r in rounds), 1e-9)

    print(f"  idle (before)           {statistics.median(idle):7.1f} programs/s  ({per_round} per round)")
    print(f"  engine generating       {statistics.median(busy):7.1f} programs/s")
    print(f"  idle (after)            {statistics.median(after):7.1f} programs/s")
    print(f"  engine alone            {tok_s(alone_rounds[1:]):7.0f} tokens/s  "
          f"({len(alone_rounds) - 1} rounds after the first)")
    print(f"  engine beside sandbox   {tok_s(beside):7.0f} tokens/s  ({len(beside)} rounds entirely inside the timing)")


if __name__ == "__main__":
    main()
