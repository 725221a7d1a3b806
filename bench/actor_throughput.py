"""GenerationActor throughput vs bare ``vllm.LLM.generate`` on the same prompts (target ratio >= 0.9).

    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/actor_throughput.py
    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/actor_throughput.py --prompts 256 --group-size 16 --repeats 5

Both sides use the tiny world's model (``launch.worlds.tiny.build.ensure_tiny_world``, cached under
.cache), the same prompts ("Q: a+b\\nA: ") and the same sampling settings: n = group size,
temperature 1, top_p 1, ``max_tokens``, ``logprobs=0`` (the sampled token's log-prob is captured).

* actor: ONE ``GenerationActor`` made by ``actors.factory.create_generation_actors``, its loop
  running, fed through the real buffer: the driver puts the prompts on the ``prompts`` stream of
  a private embedded redis-server (127.0.0.1, AOF everysec) and reads the finished groups back
  from the ``groups`` stream like the learner does (take + ACK). The timer runs from
  ``put_prompts`` until the last group is read, so it includes everything the actor adds to the
  engine: admission from Redis, step-wise engine driving, log-prob extraction, reward scoring
  (in-process, as in tests/integration/test_actors.py), encoding and the group write + prompt
  ACK, heartbeats. Tokens = response lengths of the groups read back. Both sides end with each
  response's text: the actor asks vLLM for no detokenization and decodes each response once in a
  scoring thread (the "none" scorer too), where ``LLM.generate`` decodes every sampled token as it
  comes, for the text and for each log-prob's token (its default).
* bare: a plain Ray actor holding a ``vllm.LLM`` made by the same ``actors.engine.build_llm``
  with the same ``ActorConfig`` (hence identical engine settings: in-process engine core
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``VLLM_CPU_KVCACHE_SPACE``, enforce_eager, dtype,
  max_model_len, max_num_seqs, logprobs_mode, seed) and the same Ray options (num_cpus, hence
  the same OMP thread count Ray gives the worker). Timer = ``LLM.generate`` alone (all prompts
  in one call); tokens = ``len(token_ids)`` of every ``CompletionOutput``. Reading the log-probs
  back is checked after the timer, i.e. not charged to the bare side.

Why two Ray actors: the engine then runs in the same kind of process with the same thread
budget on both sides, so the ratio isolates the actor's own overhead. Both engines stay alive
(model and KV cache are small), but only one works at a time: during a bare phase the
GenerationActor's loop is idle (it blocks on the empty prompts stream, ~5 Redis calls per
``idle_poll_ms``), during an actor phase the bare actor waits for a call. The CPU seconds each
engine process (with its children: the actor's math-verify server) used in each phase are
printed, so an idle side that is not idle would show; tokens per CPU second of the working side
give a second ratio that other load on the machine disturbs much less than wall time (it does
not see time the actor loop spends waiting on Redis).

Scoring (``--scoring``): ``inline`` scores every group with math-verify in the actor's process
tree, as in the tests; ``none`` gives the actor a scorer that returns reward 0 without looking
(``UnscoredRewards`` below, benchmark-only). The tiny model's answers are ~7 tokens, so here
math-verify costs about as much CPU per token as generation itself (~2000 verifications/s,
bench/reward_throughput.py) and competes with the engine for the machine's 2 cores; with
1K-16K-token answers it is ~1000x smaller per token, and in a run the RewardPool's Ray workers
do it on other cores. ``none`` isolates what the actor itself adds (admission from Redis,
engine driving, log-prob capture, encoding, group write + ACK, heartbeats); both are printed.

Noise on a busy 2-core machine: each side is warmed up first (engine, prefix cache, the reward
verifier's import), then rounds of one phase per side (each actor variant, then bare) run
``--repeats`` times; each round gives a ratio actor/bare per variant, and the median ratio is the
result (load drift hits the members of a round alike). Prompt ids are fresh per phase (a group id is consumed only once);
the problems themselves repeat, so prefix caching helps both sides equally.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paired import ROUNDS, ratio_line  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=2048,
                   help="prompts per timed phase (tiny-model answers average ~7 tokens: ~15 s a phase here)")
    p.add_argument("--group-size", type=int, default=16, help="responses per prompt (n)")
    p.add_argument("--max-tokens", type=int, default=64, help="response budget per sample")
    p.add_argument("--repeats", type=int, default=ROUNDS, help="timed paired rounds (one phase per side); the "
                   "median ratio and its spread count")
    p.add_argument("--warmup-prompts", type=int, default=32, help="prompts of the untimed warm-up phase per side")
    p.add_argument("--max-prompts-in-flight", type=int, default=64, help="ActorConfig.max_prompts_in_flight")
    p.add_argument("--max-model-len", type=int, default=256, help="engine context length (tiny model: 256)")
    p.add_argument("--num-cpus", type=float, default=1.0, help="Ray CPUs per engine actor (both sides)")
    p.add_argument("--scoring", default="inline,none",
                   help="comma-separated actor variants: inline (math-verify in the actor), none (reward 0)")
    return p.parse_args()


def _cpu_seconds(pid: int) -> float:
    """CPU time of an engine process and its live children (the actor's math-verify server)."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class UnscoredRewards:
    """Benchmark-only scorer: reward 0 for every response, no verification (``--scoring none``)."""

    def score_many(self, requests):
        from rewards.result import RewardResult

        return [[RewardResult(reward=0.0, reason="wrong", extracted=None) for _ in r.texts] for r in requests]


class BareEngineImpl:
    """``vllm.LLM`` built exactly as the GenerationActor builds its engine, driven by ``generate``."""

    def __init__(self, cfg, model_dir: str, group_size: int):
        from actors.engine import build_llm

        self.cfg = cfg
        # as the actor's index 0 builds it: seed + 0, a whole group per prompt in flight
        self.llm = build_llm(cfg, model_dir, seed=0, max_num_seqs=max(cfg.max_prompts_in_flight * group_size, 16))

    def generate(self, prompt_ids: list[list[int]], n: int, max_tokens: int) -> tuple[int, float]:
        """(response tokens, seconds) for one ``LLM.generate`` call over every prompt."""
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=1.0, top_p=self.cfg.top_p,
                                max_tokens=max_tokens, logprobs=0)
        t0 = time.perf_counter()
        outs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        tokens = 0
        for o in outs:
            assert len(o.outputs) == n
            for c in o.outputs:
                assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
                tokens += len(c.token_ids)
        return tokens, seconds


def engine_info() -> dict:
    """Process facts of an engine actor (called through ``__ray_call__`` on both sides)."""
    import torch

    return {"pid": os.getpid(), "torch_threads": torch.get_num_threads(),
            "cpus": sorted(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_NUM_THREADS")}


def make_prompts(tok, problems, n: int, max_tokens: int, tag: str) -> list:
    import numpy as np

    from buffer.messages import PromptMsg

    return [PromptMsg(prompt_id=f"{tag}-{i}", data_source=p.data_source,
                      prompt_ids=np.asarray(tok(p.prompt)["input_ids"], dtype=np.int32),
                      answer=p.answer, n_samples=n, max_tokens=max_tokens, step=0, min_version=0)
            for i, p in enumerate(problems)]


def actor_phase(buf, prompts: list, timeout_s: float = 600.0) -> tuple[int, float]:
    """Put the prompts, read every group back (take + ACK, as the learner): (tokens, seconds)."""
    want, got, tokens = {p.prompt_id for p in prompts}, 0, 0
    t0 = time.perf_counter()
    buf.put_prompts(prompts)
    while got < len(want):
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError(f"only {got}/{len(want)} groups after {timeout_s:.0f} s")
        batch = buf.take_groups("bench-learner", count=len(want) - got, block_ms=200)
        if batch:
            buf.ack_groups([e for e, _ in batch], [g.group_id for _, g in batch])
            for _, g in batch:
                assert g.group_id in want and len(g.responses) == prompts[0].n_samples
                tokens += sum(r.length for r in g.responses)
            got += len(batch)
    return tokens, time.perf_counter() - t0


def main() -> int:
    args = parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    from transformers import AutoTokenizer

    from actors.config import ActorConfig
    from actors.factory import create_generation_actors, fan_out, start_loops
    from buffer import EmbeddedRedis, RunBuffer
    from actors.cluster.priority import SYSTEM_CONFIG
    from launch.worlds.tiny.build import ensure_tiny_world
    from launch.worlds.tiny.task import read_problems

    variants = [v.strip() for v in args.scoring.split(",") if v.strip()]
    unknown = set(variants) - {"inline", "none"}
    if unknown or not variants:
        raise SystemExit(f"--scoring: unknown variant(s) {sorted(unknown)}; use inline and/or none")
    world = ensure_tiny_world()
    model_dir = str(world.model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    problems = read_problems(world.train_path)
    if len(problems) < max(args.prompts, args.warmup_prompts):
        problems = problems * (max(args.prompts, args.warmup_prompts) // len(problems) + 1)
    cfg = ActorConfig(num_actors=1, max_model_len=args.max_model_len, max_prompts_in_flight=args.max_prompts_in_flight,
                      num_cpus=args.num_cpus)
    print(f"actor throughput: {args.prompts} prompts x n {args.group_size}, max_tokens {args.max_tokens}, "
          f"{args.repeats} rounds, scoring {variants}, max_prompts_in_flight {cfg.max_prompts_in_flight}, "
          f"num_cpus {cfg.num_cpus}, kv {cfg.cpu_kv_cache_gib} GiB, enforce_eager {cfg.enforce_eager}", flush=True)

    sides = [f"actor/{v}" for v in variants] + ["bare"]
    env = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kv_cache_gib), "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="lagrl-bench-actor-") as tmp, \
            EmbeddedRedis(tmp, stop_at_exit=True) as server:
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 num_cpus=max(2, int((len(variants) + 1) * args.num_cpus + 0.999)), log_to_driver=False,
                 configure_logging=False, runtime_env={"env_vars": env}, _system_config=SYSTEM_CONFIG)
        actors, bare, loops, info, runners = {}, None, [], {}, {}
        try:
            for v in variants:    # one actor per variant, each in its own run namespace (own prompts stream)
                t = time.perf_counter()
                run_id = f"bench-{uuid.uuid4().hex[:8]}"
                [actor] = create_generation_actors(cfg, run_id, server.url, model_dir, group_size=args.group_size,
                                                   reward_scorer=UnscoredRewards() if v == "none" else None)
                actors[f"actor/{v}"] = (actor, RunBuffer.from_url(server.url, run_id))
                loops += start_loops([actor])
                ray.get(actor.status.remote(), timeout=600)     # returns once the engine is built
                info[f"actor/{v}"] = ray.get(actor.__ray_call__.remote(lambda _self: engine_info()), timeout=600)
                print(f"  actor/{v} engine ready in {time.perf_counter() - t:.0f} s", flush=True)
            t = time.perf_counter()
            bare = ray.remote(BareEngineImpl).options(num_cpus=cfg.num_cpus, runtime_env={"env_vars": env}) \
                .remote(cfg, model_dir, args.group_size)
            info["bare"] = ray.get(bare.__ray_call__.remote(lambda _self: engine_info()), timeout=600)
            print(f"  bare engine ready in {time.perf_counter() - t:.0f} s", flush=True)
            for side, i in info.items():
                print(f"  {side:>12} engine process: pid {i['pid']}, torch threads {i['torch_threads']}, "
                      f"OMP_NUM_THREADS {i['omp']}, cpus {i['cpus']}", flush=True)
            counter = iter(range(1 << 30))

            def cpu_now() -> dict:
                return {s: _cpu_seconds(i["pid"]) for s, i in info.items()}

            def actor_runner(buf):
                def run(count: int) -> tuple[int, float, dict]:
                    prompts = make_prompts(tok, problems[:count], args.group_size, args.max_tokens,
                                           f"p{next(counter)}")
                    cpu0 = cpu_now()
                    tokens, seconds = actor_phase(buf, prompts)
                    return tokens, seconds, {s: c - cpu0[s] for s, c in cpu_now().items()}
                return run

            def run_bare(count: int) -> tuple[int, float, dict]:
                ids = [tok(p.prompt)["input_ids"] for p in problems[:count]]
                cpu0 = cpu_now()
                tokens, seconds = ray.get(bare.generate.remote(ids, args.group_size, args.max_tokens))
                return tokens, seconds, {s: c - cpu0[s] for s, c in cpu_now().items()}

            runners = {side: actor_runner(buf) for side, (_, buf) in actors.items()} | {"bare": run_bare}
            for side, run in runners.items():
                tokens, seconds, _ = run(args.warmup_prompts)
                print(f"  warm-up {side:>12}: {tokens} tokens in {seconds:.1f} s", flush=True)

            rounds = []
            print(f"  {'round':>5} {'side':>12} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} "
                  + " ".join(f"{'CPU s ' + s:>17}" for s in sides), flush=True)
            for rep in range(args.repeats):
                row = {}
                for side, run in runners.items():   # alternate, so load drift hits every side alike
                    tokens, seconds, cpu = run(args.prompts)
                    row[side] = tokens / seconds
                    row[f"{side}_cpu"] = tokens / max(cpu[side], 1e-9)
                    print(f"  {rep:>5} {side:>12} {tokens:>7} {seconds:>8.2f} {row[side]:>9.0f} "
                          + " ".join(f"{cpu[s]:>17.1f}" for s in sides), flush=True)
                rounds.append(row)
            for side, (actor, _) in actors.items():
                status = ray.get(actor.status.remote(), timeout=60)
                if status["last_error"]:
                    print(f"  {side} last_error: {status['last_error']}", flush=True)
        finally:
            handles = [a for a, _ in actors.values()]
            if loops:
                try:
                    fan_out(handles, "stop", timeout=60)
                    ray.get(loops, timeout=60)
                except Exception as exc:  # report, still clean up
                    print(f"  stopping the actors: {type(exc).__name__}: {exc}", flush=True)
            for handle in [*handles, bare]:
                if handle is not None:
                    ray.kill(handle)
            ray.shutdown()

    def fmt(values: list[float], spec: str) -> str:
        return f"{', '.join(format(v, spec) for v in values)} (median {statistics.median(values):{spec}})"

    for side in sides:
        print(f"tokens/s {side + ':':<13} {fmt([r[side] for r in rounds], '.0f')}")
    for side in sides[:-1]:
        ratios = [r[side] / r["bare"] for r in rounds]
        cpu_ratios = [r[f"{side}_cpu"] / r["bare_cpu"] for r in rounds]
        print(ratio_line(f"{side}/bare (tokens/s, wall)", ratios))
        print(f"  per engine-CPU-second {fmt(cpu_ratios, '.3f')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
