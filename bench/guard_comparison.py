"""On-policy vs reuse-4 vs reuse-4 with the lag guard, on several seeds: entropy, accuracy, wall time.

    .venv/bin/python bench/guard_comparison.py                       # tiny world, 3 seeds, 30 steps
    .venv/bin/python bench/guard_comparison.py --seeds 0 1 2 3 4 --steps 60 --out runs/guard-cmp

Each seed is one ``launch.experiments.ablation`` run of the three presets (one learning rate for all
three: the smallest their scaling gives, so they differ in the sampling regime and the guard only),
with ``--seed`` for every arm. Per arm it prints mean ± sd over seeds of: entropy at the first
and last step and its lowest value, the entropy floor the guard's defaults give that run (the largest of
its floors, ``learner.guard_rules.entropy_floors``), the share of steps trained
strictly on-policy, the guard's fallbacks, held-out eval avg@n first/last, and wall seconds.
Everything per run is also written to ``<out>/guard_comparison.json``. A seed whose three runs finished
(``<out>/seed<N>/ablation.json``) is kept when the bench runs again; an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESETS = ("onpolicy", "offpolicy_reuse4", "offpolicy_guarded")


def run_figures(run: dict) -> dict:
    """The figures of one finished run from its metrics.jsonl (the ablation's summary has the rest)."""
    from launch.run.summary import read_metrics
    from learner.config import GuardConfig
    from learner.guard_rules import Baseline, entropy_floors

    rows = read_metrics(Path(run["run_path"]) / "metrics.jsonl")
    entropy = [r["entropy/mean"] for r in rows if "entropy/mean" in r]
    lag0 = [r.get("lag/max", 0) == 0 for r in rows]
    # the floor the guard's defaults give this run (the same for every arm: the guard's start entropy)
    guard = GuardConfig(enabled=True)
    targets = [r["entropy/target"] for r in rows if r.get("entropy/target") is not None]
    base = Baseline(statistics.fmean(entropy[:guard.start_steps]), targets[-1] if targets else None)
    return {"entropy_min": min(entropy), "guard_floor": max(entropy_floors(guard, base).values()),
            "on_policy_share": sum(lag0) / len(lag0),
            "fallbacks": max((r.get("guard/fallbacks", 0.0) for r in rows), default=0.0)}


def mean_sd(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.fmean(vals):.3f} ± {sd:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("runs/guard-comparison"))
    args = ap.parse_args(argv)
    from launch.experiments.ablation import run_ablation

    runs: list[dict] = []
    for seed in args.seeds:
        done = args.out / f"seed{seed}" / "ablation.json"
        report = json.loads(done.read_text()) if done.exists() else None
        if report is not None and not any("error" in r for r in report["runs"]):
            print(f"[guard-cmp] seed {seed}: done before ({done}), kept", flush=True)
        else:       # a run stopped part-way resumes from its last checkpoint (same run id)
            print(f"[guard-cmp] seed {seed}: {', '.join(PRESETS)}, {args.steps} steps each", flush=True)
            report = run_ablation(list(PRESETS), args.out / f"seed{seed}", tiny=True, steps=args.steps,
                                  prefix=f"guard-s{seed}", overrides=["--seed", str(seed)])
        for run in report["runs"]:
            if "error" in run:
                print(f"[guard-cmp] seed {seed} {run['preset']} FAILED: {run['error']}", flush=True)
                return 1
            runs.append({**run, **run_figures(run), "seed": seed, "lr": report["lr"]})
    (args.out / "guard_comparison.json").write_text(json.dumps(runs, indent=1, default=float))

    cols = [("entropy first", "entropy_first"), ("entropy last", "entropy_last"), ("entropy min", "entropy_min"),
            ("guard floor", "guard_floor"), ("on-policy share", "on_policy_share"), ("fallbacks", "fallbacks"),
            ("eval first", "eval_avg@n_first"), ("eval last", "eval_avg@n_last"), ("wall s", "seconds")]
    print(f"\n[guard-cmp] {len(args.seeds)} seeds, {args.steps} steps, lr {runs[0]['lr']:g}; mean ± sd over seeds")
    print(f"{'preset':<20}" + "".join(f"{name:>18}" for name, _ in cols))
    for preset in PRESETS:
        mine = [r for r in runs if r["preset"] == preset]
        print(f"{preset:<20}" + "".join(f"{mean_sd([r[key] for r in mine]):>18}" for _, key in cols))
    wall = {p: statistics.fmean(r["seconds"] for r in runs if r["preset"] == p) for p in PRESETS}
    print(f"[guard-cmp] wall time guarded / reuse-4: {wall['offpolicy_guarded'] / wall['offpolicy_reuse4']:.2f}, "
          f"on-policy / reuse-4: {wall['onpolicy'] / wall['offpolicy_reuse4']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
