"""Asynchronous vs synchronous RL on the tiny world: the same learner steps, the same batches, wall time.

    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/async_vs_sync.py
    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/async_vs_sync.py --steps 20 --rounds 1 --order async sync

* sync  = preset ``onpolicy`` (strict on-policy): the feeder releases step s's prompts only once
  version s exists, so generation of batch s+1 waits for training step s: they alternate.
* async = preset ``cliphigh_0.2``: lag ``bounded:1``, N_reuse 1, D_T = D_R and the
  symmetric clip 0.2/0.2, so batch s+1 is generated with version s-1 weights *while* step s trains.
  The script checks that the two learner configs differ only in ``lag``.

Both run with ``--tiny`` (D_R 32 prompts x 16 responses x 16 tokens, one actor, one learner rank)
in this process, one after the other, sharing one local Ray. Evaluation is cut to the minimum
(before and after only, on 16 held-out problems) since it is not what is compared. Reported per run:

* total: ``launch.run.driver.run`` start to end (engine start-up, DeepSpeed init, the two evals);
* learner loop: the sum of the learner's ``time/step`` over all steps (startup excluded; step 0
  includes generating the first batch, which neither mode can overlap);
* steady state: the same over steps 1.. (where asynchrony can overlap generation with training),
  and the mean wait-for-data per step there.

``--rounds`` paired rounds (5 by default, the order flipped every round): a single pair of 15-step runs
read anything from 0.69 to 0.95 of the bound with the same code on the same day, so the figure is the
median over the rounds, with its spread. The ratio sync/async > 1 means asynchrony saved time. On 2 CPU cores the actor (1 CPU) and the
learner rank (1 CPU) each have a core, so the overlap is real but both share memory bandwidth.

The machine's own bound is printed beside the issue's: the busy core-seconds of every process on the
machine over the steady steps (psutil's system CPU times at each step's end). A sync step's work spread
perfectly over all cores takes busy / cores seconds; an async step doing the same work cannot be
shorter, whatever the overlap. Where that exceeds max(generation, training), the cores, not the loop,
hold the async step above the issue's bound.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paired import ROUNDS, ratio_line  # noqa: E402

MODES = {"sync": "onpolicy", "async": "cliphigh_0.2"}
TARGET_OF_BOUND = 0.9     # issue 32: the async steady step within 1/0.9 of max(generation, training)


def configs(steps: int, run_dir: Path, tag: str, extra: list[str]):
    from launch.run.compose import build_config

    cfgs = {}
    for mode, preset in MODES.items():
        argv = ["--tiny", "--steps", str(steps), "--run_dir", str(run_dir), "--run_id", f"{tag}-{mode}",
                "--data.eval_every", "0", "--data.eval_max_problems", "16", *extra]
        cfgs[mode], _ = build_config(argv, default_preset=preset)
    a, b = cfgs["sync"].learner.model_dump(), cfgs["async"].learner.model_dump()
    diff = sorted(k for k in a if a[k] != b[k])
    if diff != ["lag"] or cfgs["sync"].actors != cfgs["async"].actors:
        raise SystemExit(f"sync and async configs differ beyond the lag: {diff}")
    assert cfgs["async"].learner.batch.n_reuse == 1 and cfgs["async"].learner.batch.mini_batch == cfgs["async"].learner.batch.rollout_batch
    return cfgs


class BusyCores:
    """``on_step`` hook: the machine's busy core-seconds (every process, psutil's system CPU times) and
    the wall clock at each step's end, and each process's CPU seconds at the first and the last of
    ``steps`` (a snapshot of every process takes ~10 ms, which each step would pay in the driver);
    ``steady()`` covers steps 1.. (from step 0's end to the last's)."""

    def __init__(self, steps: int):
        self.steps = steps
        self.marks: list[tuple[float, float]] = []
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, tuple[str, float]] = {}

    def __call__(self, learner, actors, metrics) -> None:
        if not self.marks:                  # before the mark: the snapshot's own ~10 ms stays outside the window
            self.first = process_cpu_seconds()
        self.marks.append((time.monotonic(), busy_core_seconds()))
        if len(self.marks) == self.steps:
            self.last = process_cpu_seconds()

    def steady(self) -> dict:
        if len(self.marks) < 2:
            return {"busy_cores": math.nan, "busy_core_s_per_step": math.nan, "by_process": {}}
        (w0, b0), (w1, b1) = self.marks[0], self.marks[-1]
        steps = len(self.marks) - 1
        by_process: dict[str, float] = {}
        for pid, (name, cpu) in self.last.items():      # a process started meanwhile counts from 0
            by_process[name] = by_process.get(name, 0.0) + (cpu - self.first.get(pid, (name, 0.0))[1]) / steps
        return {"busy_cores": (b1 - b0) / max(w1 - w0, 1e-9), "busy_core_s_per_step": (b1 - b0) / steps,
                "by_process": by_process}


def process_cpu_seconds() -> dict[int, tuple[str, float]]:
    """pid -> (what it runs, user + system CPU seconds) of every process we may read."""
    out = {}
    for p in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        if p.info["cpu_times"] is not None:
            out[p.pid] = (process_title(p.info["cmdline"] or [p.info["name"] or "?"]),
                          p.info["cpu_times"].user + p.info["cpu_times"].system)
    return out


def process_title(cmdline: list[str]) -> str:
    """A Ray worker's title names its actor class and current method: keep the class; else the program."""
    if cmdline[0].startswith("ray::"):
        return cmdline[0].split(".")[0][:48]
    return " ".join(Path(c).name for c in cmdline[:3])[:48]


def busy_core_seconds() -> float:
    t = psutil.cpu_times()    # Linux counts guest time inside user; steal is the host's, not ours
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def timings(result, cores: BusyCores) -> dict:
    steps = result.metrics
    step_s = [float(m["time/step"]) for m in steps]
    wait_s = [float(m["time/wait_data"]) for m in steps]
    return {"steps": len(steps), "total_s": result.seconds, "loop_s": sum(step_s), "steady_s": sum(step_s[1:]),
            "steady_wait_per_step_s": sum(wait_s[1:]) / max(len(wait_s) - 1, 1),
            "train_per_step_s": sum(float(m["time/train"]) for m in steps[1:]) / max(len(steps) - 1, 1),
            "lag_max": max(float(m["lag/max"]) for m in steps), "lag_mean": sum(float(m["lag/mean"]) for m in steps) / len(steps),
            "accuracy_last": steps[-1].get("reward/accuracy"), **cores.steady()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=15, help="learner steps per run")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="paired rounds (a sync and an async run each, "
                    "the order flipped every round); the figure is the median over them")
    ap.add_argument("--order", nargs=2, choices=sorted(MODES), default=["sync", "async"],
                    help="the first round's order")
    ap.add_argument("--run_dir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args, extra = ap.parse_known_args()
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="async-vs-sync-"))
    tag = time.strftime("avs-%H%M%S")
    usable = len(os.sched_getaffinity(0))
    if usable < psutil.cpu_count():
        print(f"[bench] warning: this process may use {usable} of the machine's "
              f"{psutil.cpu_count()} CPUs; the machine's bound counts every CPU's busy time and needs a machine "
              "of its own", flush=True)

    from launch.run.driver import init_ray, run

    rounds = []
    for rnd in range(args.rounds):
        cfgs = configs(args.steps, run_dir, f"{tag}-r{rnd}", extra)
        if rnd == 0:
            init_ray(cfgs["sync"])
        out = {}
        for mode in (args.order if rnd % 2 == 0 else args.order[::-1]):
            print(f"[bench] === round {rnd + 1}/{args.rounds}: {mode} ({MODES[mode]}), {args.steps} steps ===",
                  flush=True)
            cores = BusyCores(args.steps)
            out[mode] = timings(run(cfgs[mode], on_step=cores), cores)
        rounds.append(report_round(out))
    attained = [r["bound"]["attained"] for r in rounds]
    speedups = [r["ratios"]["steady_s"] for r in rounds]
    print(f"\nsteady-state speedup sync/async: median {statistics.median(speedups):.2f} "
          f"(spread {min(speedups):.2f}-{max(speedups):.2f}) over {len(rounds)} round(s)")
    print(ratio_line("async steady step, of the max(generation, training) bound", attained, TARGET_OF_BOUND))
    print(ratio_line("async steady step, of the machine's bound max(generation, training, sync work / cores)",
                     [r["bound"]["attained_machine"] for r in rounds], TARGET_OF_BOUND))
    ceilings = [r["bound"]["ceiling"] for r in rounds]
    print(f"this machine's ceiling for the first figure (the sync step's work on every core): median "
          f"{statistics.median(ceilings):.2f} (spread {min(ceilings):.2f}-{max(ceilings):.2f})")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "run_dir": str(run_dir)}, indent=2))


def report_round(out: dict) -> dict:
    """Print one round's runs side by side and its bound; its numbers."""
    s, a = out["sync"], out["async"]
    print(f"\n{'':<8}{'steps':>6}{'total s':>9}{'loop s':>8}{'steady s':>10}{'wait/step':>11}{'train/step':>12}{'lag max':>9}")
    for mode in ("sync", "async"):
        r = out[mode]
        print(f"{mode:<8}{r['steps']:>6}{r['total_s']:>9.1f}{r['loop_s']:>8.1f}{r['steady_s']:>10.1f}"
              f"{r['steady_wait_per_step_s']:>11.2f}{r['train_per_step_s']:>12.2f}{r['lag_max']:>9.0f}")
    ratios = {k: s[k] / a[k] for k in ("total_s", "loop_s", "steady_s")}
    print(f"ratio sync/async: total {ratios['total_s']:.2f}, learner loop {ratios['loop_s']:.2f}, "
          f"steady state (steps 1..) {ratios['steady_s']:.2f}")
    bound = async_bound(s, a)
    print(f"async bound: a sync step = generation {bound['gen_s']:.2f} s (its wait for data) + training "
          f"{bound['train_s']:.2f} s; overlapped perfectly an async step takes max of the two, "
          f"{bound['bound_step_s']:.2f} s (speedup {bound['bound_speedup']:.2f}); measured "
          f"{bound['async_step_s']:.2f} s (speedup {ratios['steady_s']:.2f}): {bound['attained']:.2f} of the bound "
          f"(target >= {TARGET_OF_BOUND})")
    print(f"the machine: busy cores over the steady steps, sync {s['busy_cores']:.2f}, async {a['busy_cores']:.2f} "
          f"of {bound['cores']}; a sync step's work ({s['busy_core_s_per_step']:.2f} core-s, async "
          f"{a['busy_core_s_per_step']:.2f}) takes at least {bound['work_step_s']:.2f} s on {bound['cores']} cores: "
          f"the machine's bound {bound['machine_step_s']:.2f} s, of which the async step attained "
          f"{bound['attained_machine']:.2f}; the work packed perfectly would attain {bound['ceiling']:.2f} of the "
          "max(generation, training) bound")
    per_s, per_a = s["by_process"], a["by_process"]
    names = sorted(set(per_s) | set(per_a), key=lambda n: -max(per_s.get(n, 0.0), per_a.get(n, 0.0)))
    print("core-s per steady step, by process (sync / async):")
    for name in names[:8]:
        print(f"  {per_s.get(name, 0.0):6.3f} / {per_a.get(name, 0.0):6.3f}  {name}")
    print(flush=True)
    return {"runs": out, "ratios": ratios, "bound": bound}


def async_bound(sync: dict, asyn: dict) -> dict:
    """The steady-state step an async run could reach: max(generation, training) as the sync run measured
    them (its learner waits for a whole batch to be generated and scored, then trains), against the async
    run's own steady step; ``attained`` = bound step / measured step (1.0 = perfect overlap).
    ``attained_machine``: the same against max(that bound, the sync step's busy core-seconds / cores)."""
    gen, train = sync["steady_wait_per_step_s"], sync["train_per_step_s"]
    sync_step = sync["steady_s"] / max(sync["steps"] - 1, 1)
    async_step = asyn["steady_s"] / max(asyn["steps"] - 1, 1)
    bound_step = max(gen, train)
    cores = psutil.cpu_count()      # the machine's: its busy time is read machine-wide (a machine of its own)
    work_step = sync["busy_core_s_per_step"] / cores      # the sync step's work, every core busy
    machine_step = max(bound_step, work_step)
    return {"gen_s": gen, "train_s": train, "sync_step_s": sync_step, "bound_step_s": bound_step,
            "async_step_s": async_step, "bound_speedup": sync_step / bound_step, "attained": bound_step / async_step,
            "cores": cores, "work_step_s": work_step, "machine_step_s": machine_step,
            "attained_machine": machine_step / async_step, "ceiling": bound_step / machine_step}


if __name__ == "__main__":
    main()
