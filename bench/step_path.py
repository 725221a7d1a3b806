"""Where a learner step's time goes: the critical-path trace of the tiny on- and off-policy presets.

    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/step_path.py
    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/step_path.py --steps 20 --modes on --json out.json
    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/step_path.py --steps 20 --modes on --rounds 3

On one GPU, shared by the actor and the learner rank as the smoke's run shares it (``launch.ops.smoke``):
``--modes on --actors.dtype bfloat16 --actors.num_gpus 0.5 --actors.gpu_memory_utilization 0.25
--learner.device cuda --learner.dtype bf16 --learner.gpus_per_rank 0.5``.

Runs each preset with ``--tiny`` (D_R 32 prompts x 16 responses, one actor, one learner rank, no
evaluation beyond the minimum) in this process, one after the other, sharing one local Ray:

* on  = preset ``onpolicy`` (strict on-policy: lag 0, step s's prompts need version s);
* off = preset ``cliphigh_0.2`` (off-policy, max_lag 1: generation overlaps training).

Per steady step (the first ``--skip`` steps excluded: engine warm-up, the first batch) the learner's
``path/*`` metrics (``learner.step_path``) give each hop of the step's critical path; printed is each
hop's median share of the step (``path/seg/<hop>`` / ``path/trained``) and:

* **generation efficiency** = bare ``LLM.generate`` time for the same prompts (the groups the step
  read for itself, captured from the groups stream after each step) and the same sampling settings
  (n = group size, the run's temperature and top_p, each group's max_tokens, log-probs on), on an
  engine built as the actor builds its own (``actors.engine.build_llm``, same Ray CPU budget), divided
  by the step's generation phase ``path/gen_phase`` (the version in the buffer -> the learner has
  its D_R valid groups). Target >= 0.8 on-policy. Off-policy generation overlaps training, so the
  phase the learner waits for is short and the figure is not comparable (printed for reference);
* **stale waste** = responses dropped as stale / responses read (``lag/stale_dropped`` over
  ``groups/read`` x group size). Target <= 1% in strict on-policy.

Each figure is printed with its target beside it; nothing here is asserted. ``--rounds N`` runs each
mode N times, each run followed at once by its bare measurement (a paired round), and prints the median
efficiency over the rounds with its spread (``bench.paired``): the machine drifts between runs by more
than most changes (bare alone took 0.56-0.80 s in one sitting's runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = {"on": "onpolicy", "off": "cliphigh_0.2"}
EFFICIENCY_TARGET, STALE_TARGET = 0.8, 0.01


class StepPrompts:
    """``on_step`` hook of ``launch.run.driver.run``: the metrics row and the prompts (with their
    response budget) of every group the groups stream got, by the step they were issued for."""

    def __init__(self):
        self.rows: list[dict] = []
        self.prompts: dict[int, list[tuple[list[int], int]]] = {}
        self._since = "-"

    def __call__(self, learner, actors, metrics: dict) -> None:
        from buffer.codec import decode_group
        from buffer.keys import PAYLOAD
        from buffer.messages import InvalidMessage

        buf = learner.buffer
        entries = buf.client.xrange(buf.keys.groups, min=self._since)
        for entry_id, fields in entries:
            if entry_id.decode() == self._since:
                continue
            try:
                g = decode_group(fields.get(PAYLOAD, b""))
            except InvalidMessage:
                continue        # the learner dead-letters it
            self.prompts.setdefault(g.step, []).append((g.prompt_ids.tolist(), g.max_tokens))
        if entries:
            self._since = entries[-1][0].decode()
        self.rows.append(dict(metrics))


class BareEngine:
    """``vllm.LLM`` built exactly as a GenerationActor builds its engine, driven by ``LLM.generate``."""

    def __init__(self, cfg, model_dir: str, group_size: int):
        from actors.engine import build_llm

        self.cfg = cfg
        self.llm = build_llm(cfg, model_dir, seed=0, max_num_seqs=max(cfg.max_prompts_in_flight * group_size, 16))

    def generate(self, prompts: list[tuple[list[int], int]], n: int, temperature: float) -> float:
        """Seconds of one ``LLM.generate`` call over ``prompts`` ((token ids, max_tokens) each)."""
        from vllm import SamplingParams

        params = [SamplingParams(n=n, temperature=temperature, top_p=self.cfg.top_p, max_tokens=max_tokens,
                                 logprobs=0) for _, max_tokens in prompts]
        t0 = time.perf_counter()
        self.llm.generate([{"prompt_token_ids": ids} for ids, _ in prompts], params, use_tqdm=False)
        return time.perf_counter() - t0

    def close(self) -> None:
        """Shut the engine down (a separate engine core frees its GPU memory now, before the next run)."""
        from launch.ops.smoke.context import close_llm

        close_llm(self.llm)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(rows: list[dict], bare_s: dict[int, float], group_size: int, skip: int) -> dict:
    """Median hop shares, generation phase and efficiency over the steady steps; stale waste over all."""
    from learner.step_path import hop_shares

    steady = [r for r in rows if int(r["step"]) >= skip and float(r.get("path/trained", 0.0)) > 0]
    shares = hop_shares(steady)
    efficiency = [bare_s[int(r["step"])] / float(r["path/gen_phase"]) for r in steady
                  if int(r["step"]) in bare_s and float(r["path/gen_phase"]) > 0]
    read = sum(float(r.get("groups/read", 0)) for r in rows) * group_size
    stale = sum(float(r.get("lag/stale_dropped", 0)) for r in rows)
    return {"steps": len(steady), "step_s": median([float(r["time/step"]) for r in steady]),
            "path_s": median([float(r["path/trained"]) for r in steady]),
            "gen_phase_s": median([float(r["path/gen_phase"]) for r in steady]),
            "bare_s": median([bare_s[int(r["step"])] for r in steady if int(r["step"]) in bare_s]),
            "efficiency": median(efficiency), "shares": shares,
            "stale_responses": stale, "responses_read": read, "stale_waste": stale / read if read else float("nan")}


def report(mode: str, s: dict) -> None:
    print(f"\n[{mode}] {MODES[mode]}: {s['steps']} steady steps, median step {s['step_s']:.2f} s "
          f"(critical path {s['path_s']:.2f} s)")
    print("  hop share of the step (median): " + ", ".join(f"{k} {v:.0%}" for k, v in s["shares"].items()))
    note = "" if mode == "on" else "  (off-policy: generation overlaps training; for reference)"
    print(f"  generation efficiency {s['efficiency']:.2f}   target >= {EFFICIENCY_TARGET}   "
          f"(bare LLM.generate {s['bare_s']:.2f} s / generation phase {s['gen_phase_s']:.2f} s){note}")
    target = f"target <= {STALE_TARGET:.0%}" if mode == "on" else "(no target off-policy)"
    print(f"  stale waste {s['stale_waste']:.2%}   {target}   "
          f"({s['stale_responses']:.0f} of {s['responses_read']:.0f} responses read)")


def bare_times(bare, captured: StepPrompts, group_size: int, temperature: float, skip: int) -> dict[int, float]:
    """Bare ``LLM.generate`` seconds on each steady step's own prompts (the first call also warms up)."""
    import ray

    out: dict[int, float] = {}
    for row in captured.rows:
        step = int(row["step"])
        prompts = captured.prompts.get(step, [])[: int(row.get("path/groups", 0))]
        if step < skip or not prompts:
            continue
        if not out:               # warm-up call on the first prompts (engine, prefix cache)
            ray.get(bare.generate.remote(prompts, group_size, temperature))
        out[step] = ray.get(bare.generate.remote(prompts, group_size, temperature))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12, help="learner steps per run")
    ap.add_argument("--skip", type=int, default=2, help="first steps left out of the medians (warm-up)")
    ap.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["on", "off"])
    ap.add_argument("--rounds", type=int, default=1, help="runs per mode, each followed at once by its bare "
                    "measurement (a paired round: the machine's drift between rounds, bare alone 0.56-0.80 s "
                    "in one sitting, hits both sides of a round); the figure is the median over rounds")
    ap.add_argument("--run_dir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args, extra = ap.parse_known_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="step-path-"))
    tag = time.strftime("sp-%H%M%S")

    import ray

    from bench.paired import ratio_line
    from launch.run.compose import build_config
    from launch.run.driver import init_ray, run
    from launch.worlds import world_data

    def config(mode: str, rnd: int):
        argv = ["--tiny", "--steps", str(args.steps), "--run_dir", str(run_dir), "--run_id",
                f"{tag}-{mode}" + (f"-r{rnd}" if args.rounds > 1 else ""),
                "--data.eval_every", "0", "--data.eval_max_problems", "16", *extra]
        return build_config(argv, default_preset=MODES[mode])[0]

    first = config(args.modes[0], 0)
    init_ray(first)
    model_dir = world_data(first.world, first.data)[0]
    cfg = first.actors
    env = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kv_cache_gib), "TOKENIZERS_PARALLELISM": "false"}
    rounds: dict[str, list[dict]] = {m: [] for m in args.modes}
    rows: dict[str, list[dict]] = {}
    for rnd in range(args.rounds):
        for mode in args.modes:
            rc = config(mode, rnd)
            print(f"[bench] === {mode} ({MODES[mode]}): {args.steps} steps, round {rnd + 1}/{args.rounds} ===",
                  flush=True)
            captured = StepPrompts()
            run(rc, on_step=captured)
            # the share of the machine the run's actor had (its GPU too: a Ray actor asking for none sees no
            # GPU); built for each run and gone before the next, so no run shares the machine with it
            bare = ray.remote(BareEngine).options(
                num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus * cfg.tensor_parallel_size,
                runtime_env={"env_vars": env}).remote(cfg, model_dir, first.group_size)
            bare_s = bare_times(bare, captured, rc.group_size, rc.temperature, args.skip)
            ray.get(bare.close.remote())
            ray.kill(bare)
            rounds[mode].append(summarize(captured.rows, bare_s, rc.group_size, args.skip))
            rows[mode] = captured.rows
            report(mode, rounds[mode][-1])
    if args.rounds > 1:
        print()
        for mode in args.modes:
            print(f"[{mode}] " + ratio_line("generation efficiency (bare LLM.generate / generation phase)",
                                            [s["efficiency"] for s in rounds[mode]], EFFICIENCY_TARGET))
    if args.json:
        args.json.write_text(json.dumps({"figures": {m: r[-1] for m, r in rounds.items()}, "rounds": rounds,
                                         "run_dir": str(run_dir), "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
