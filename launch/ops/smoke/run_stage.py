"""Stage 5: a short tiny on-policy run through the project's own driver (``launch.run.driver.run``): Ray
actors with vLLM, the Redis buffer, math-verify rewards, a DeepSpeed learner rank, weight sync.

Checks: every step trained, every trained token at lag 0; reports the mismatch KL between the engine's and
the learner's log-probs of the same tokens (``mismatch/start_kl_k3``: the step's first update, before the
learner moves; bf16 on GPU, where it is the number every off-policy study needs, fp32 on CPU), steps/s,
and where a step's time goes: each hop's median share of the critical path after the first step
(``learner.step_path.hop_shares``; on a GPU the loop's own hops are what is left once generation and
training are fast).
The run's own console (a line per step, its summary) goes to ``run.log`` in the work directory.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from contextlib import redirect_stderr, redirect_stdout

from launch.ops.smoke.context import Context
from launch.ops.smoke.report import require
from launch.run.driver import run
from learner.step_path import hop_shares

KL_KEY = "mismatch/start_kl_k3"


def run_stage(ctx: Context) -> dict:
    cfg = ctx.run_config()
    ctx.close_engine()               # the run's actor needs the device's memory
    log = ctx.work / "run.log"
    t0 = time.monotonic()
    with open(log, "w") as out, redirect_stdout(out), redirect_stderr(out):
        result = run(cfg)
    wall = time.monotonic() - t0
    print(f"[smoke] stage 5's run console: {log}", file=sys.stderr, flush=True)
    metrics = result.metrics
    require(len(metrics) == cfg.steps, f"{len(metrics)} of {cfg.steps} steps trained (see {log})")
    lags = [m.get("lag/max") for m in metrics]
    require(all(lag == 0 for lag in lags), f"strict on-policy but lag/max per step was {lags}")
    require(all(m.get("mode") == "on_policy" for m in metrics), "a step did not run on-policy")
    kls = [m.get(KL_KEY) for m in metrics]
    require(all(k is not None and math.isfinite(k) and k >= -1e-9 for k in kls),
            f"{KL_KEY} per step {kls}: want finite and >= 0 (k3 is never negative)")
    step_s = [m["time/step"] for m in metrics]
    evals = [round(e["eval/avg@n"], 3) for e in result.evals]
    dtype = cfg.actors.dtype if cfg.actors.dtype != "auto" else ctx.engine_dtype
    learner_dtype = cfg.learner.dtype if cfg.learner.dtype != "auto" else ("bf16" if ctx.cuda else "fp32")
    kl_mean = statistics.fmean(kls)
    shares = hop_shares(metrics[1:])            # the first step also waits for the engine's warm-up
    path = ", ".join(f"{hop} {share:.0%}" for hop, share in shares.items() if share >= 0.005)
    # the engine's start is most of it on a GPU (a cache of millions of KV blocks took 146 s)
    startup = ", ".join(f"{phase} {s:.0f} s" for phase, s in result.startup.items() if s >= 0.5)
    return {"line": f"{len(metrics)} steps, lag/max 0 on every step; mismatch KL (k3, engine {dtype} vs "
                    f"learner {learner_dtype}) mean {kl_mean:.3g}, max {max(kls):.3g}; "
                    f"{len(metrics) / sum(step_s):.2f} steps/s "
                    f"({statistics.median(step_s):.2f} s a step), wall {wall:.0f} s with start-up; "
                    f"held-out avg@{cfg.data.eval_n} {evals}; a step's critical path: {path or 'not traced'}; "
                    f"started in {sum(result.startup.values()):.0f} s ({startup})",
            "steps": len(metrics), "lag_max": lags, "mismatch_kl_k3": kls, "mismatch_kl_k3_mean": kl_mean,
            "mismatch_kl_k1": [m.get("mismatch/start_kl_k1") for m in metrics], "engine_dtype": dtype,
            "learner_dtype": learner_dtype, "steps_per_s": len(metrics) / sum(step_s),
            "step_s": step_s, "path_shares": shares, "startup_s": result.startup,
            "path_s": [m.get("path/trained") for m in metrics], "wall_s": round(wall, 1), "evals": evals,
            "weight_sync_s": [m.get("time/weight_sync") for m in metrics],
            "weight_transport": cfg.actors.weight_transport, "run_path": str(result.run_path)}
