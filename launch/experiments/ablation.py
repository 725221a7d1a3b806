"""Ablation comparison: run several presets in turn on the same world, then one figure and one CSV.

    python -m launch.experiments.ablation --presets onpolicy offpolicy_reuse4 --tiny --steps 30 --out runs/ablation
    python -m launch.experiments.ablation --presets onpolicy cliphigh_0.28 --tiny --steps 30 --out runs/cliphigh -- --learner.lr 1e-4

Each preset runs in this process (``launch.run.spec.run_here``: its RunSpec's config through
``launch.run.driver.run``; one local Ray shared by all runs, or the cluster in RAY_ADDRESS; every run
starts and stops its own Redis, actors, reward workers and learner), as run ``<prefix>-<preset>`` under
``<out>/runs``. With ``--address http://<head>:8265`` the runs are Ray jobs on that cluster instead, placed
side by side as its resources allow, through the science report's runner
(``launch.experiments.science.jobs``: retries, progress lines, files back through the job's log).
Overrides after ``--`` apply to every preset. Then ``launch.experiments.analysis.compare.write_compare`` draws
``<out>/compare.png`` (entropy/mean; reward/accuracy and the held-out eval avg@n (dashed) vs
step; one colour per preset) and ``<out>/compare.csv`` (long format), and ``<out>/ablation.json``
records per preset: wall seconds, entropy and accuracy at the first/last step, eval avg@n first/last.
A preset that fails is reported and the others still run (exit status 1). The figure also goes to the
runs' trackers (their ``tracking`` config: TensorBoard by default, ``<out>/tb``) as an image of a tracker
run named after the prefix, in the same W&B project / MLflow store (``<out>/runs/mlruns``) as the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from launch.config.install_check import require_own_packages
from launch.config.presets import PRESETS
from launch.run.spec import RunSpec


def _first_last(rows: list[dict], key: str) -> tuple[float | None, float | None]:
    # a step that trained no token has entropy NaN: not a first or last value
    vals = [float(r[key]) for r in rows if r.get(key) is not None and math.isfinite(float(r[key]))]
    return (vals[0], vals[-1]) if vals else (None, None)


def summarize(preset: str, result) -> dict:
    """Per-preset numbers for the report: wall time, entropy/accuracy/eval first and last."""
    metrics, evals = result.metrics, result.evals
    ent0, ent1 = _first_last(metrics, "entropy/mean")
    acc0, acc1 = _first_last(metrics, "reward/accuracy")
    ev0, ev1 = _first_last(evals, "eval/avg@n")
    return {"preset": preset, "run_id": result.run_id, "run_path": str(result.run_path), "steps": len(metrics),
            "seconds": round(result.seconds, 1),
            "learner_seconds": round(sum(float(m.get("time/step", 0.0)) for m in metrics), 1),
            "entropy_first": ent0, "entropy_last": ent1, "train_accuracy_first": acc0, "train_accuracy_last": acc1,
            "eval_avg@n_first": ev0, "eval_avg@n_last": ev1,
            "eval_steps": [e.get("step") for e in evals], "eval_avg@n": [e.get("eval/avg@n") for e in evals]}


def fair_specs(presets: list[str], run_dir: Path, *, tiny: bool, steps: int | None, prefix: str,
               overrides: list[str]) -> tuple[list[RunSpec], float]:
    """Every preset's run, its config resolved before any run (a bad preset or override fails first), with
    one learning rate: an ablation holds all but the ablated factor equal, the learning rate included (the
    paper keeps it fixed). The world's scaling may give each preset its own (the tiny world lowers it
    with the updates per step); every preset gets the smallest, and it is printed."""
    specs = [RunSpec(preset, tuple(overrides), world="tiny" if tiny else None, steps=steps or None,
                     run_id=f"{prefix}-{preset}") for preset in presets]
    lrs = [spec.config(run_dir).learner.lr for spec in specs]
    lr = min(lrs)
    if len(set(lrs)) > 1:
        print(f"[ablation] one learning rate for every preset: {lr:g} (the smallest their scaling gives)", flush=True)
        specs = [replace(spec, overrides=(*spec.overrides, "--learner.lr", repr(lr))) for spec in specs]
    return specs, lr


def run_ablation(presets: list[str], out: str | Path, *, tiny: bool = True, steps: int | None = None,
                 prefix: str | None = None, overrides: list[str] | None = None, address: str | None = None,
                 max_concurrent: int | None = None, retries: int = 2) -> dict:
    """Run every preset (here, or as Ray jobs on the cluster at ``address``), write compare.png / compare.csv /
    ablation.json under ``out``; returns the json."""
    out = Path(out)
    prefix = prefix or time.strftime("abl-%Y%m%d-%H%M%S")
    runs = out / "runs"
    specs, lr = fair_specs(presets, runs, tiny=tiny, steps=steps, prefix=prefix, overrides=overrides or [])
    cfgs = [spec.config(runs) for spec in specs]

    # here, not at the top: Ray, vLLM, DeepSpeed and matplotlib come with them (the presets' names and fair
    # settings above need none of it)
    import matplotlib

    matplotlib.use("Agg")
    from launch.experiments.analysis import compare

    frames, report = {}, {"presets": presets, "out": str(out), "lr": lr, "runs": []}
    outcomes = (_as_jobs(specs, out, address, max_concurrent, retries) if address
                else _in_this_process(presets, specs, cfgs, runs))
    for preset, spec, outcome in zip(presets, specs, outcomes):
        if isinstance(outcome, str):
            report["runs"].append({"preset": preset, "run_id": spec.id, "error": outcome})
            continue
        frames[preset] = compare.metrics_frame(outcome.metrics + outcome.evals)
        report["runs"].append(summarize(preset, outcome))
    png, csv = compare.write_compare(frames, out)
    report.update(png=str(png), csv=str(csv))
    report["tracking"] = compare.figures_to_trackers(cfgs[0].tracking, prefix, out, {"ablation": png},
                                                     store_root=runs, hparams={"presets": presets, "lr": lr})
    (out / "ablation.json").write_text(json.dumps(report, indent=2, default=float))
    return report


def _in_this_process(presets: list[str], specs: list[RunSpec], cfgs: list, runs: Path):
    """Each run in turn in this process, one Ray for all of them: its RunResult, or its error as text."""
    from launch.run.driver import init_ray
    from launch.run.spec import run_here

    init_ray(max(cfgs, key=_cpus_needed))         # one Ray for all runs, sized for the largest
    for preset, spec, cfg in zip(presets, specs, cfgs):
        print(f"[ablation] === {preset}: {cfg.steps} steps, run {cfg.run_id} ===", flush=True)
        try:
            yield run_here(spec, runs)
        except Exception as exc:
            traceback.print_exc()
            yield f"{type(exc).__name__}: {exc}"


def _as_jobs(specs: list[RunSpec], out: Path, address: str, max_concurrent: int | None, retries: int) -> list:
    """Every run as a Ray job on the cluster at ``address``, side by side: a RunResult read back from the files
    the job returned (``<out>/runs/<run id>``), or the job's error as text."""
    from launch.experiments.science.jobs import JobRunner
    from launch.run.driver import RunResult
    from launch.run.summary import is_eval_row, read_evals, read_metrics

    done = JobRunner(address, out, max_concurrent=max_concurrent, retries=retries).run_all(specs)
    outcomes = []
    for spec in specs:
        got = done[spec.key]
        path = Path(got["path"])
        outcomes.append(got["error"] or RunResult(
            spec.id, path, redis_url="", seconds=got["seconds"], evals=read_evals(path / "evals.jsonl"),
            metrics=[row for row in read_metrics(path / "metrics.jsonl") if not is_eval_row(row)]))
    return outcomes


def _cpus_needed(cfg) -> float:
    return cfg.actors.num_actors * cfg.actors.num_cpus + cfg.learner.num_ranks * cfg.learner.cpus_per_rank


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", required=True, metavar="NAME", help="presets to compare (launch/config/presets.py)")
    ap.add_argument("--tiny", action="store_true", help="scale every preset to the tiny CPU world")
    ap.add_argument("--steps", type=int, default=None, help="learner steps per run (default: the preset's)")
    ap.add_argument("--out", type=Path, required=True, help="output directory (figure, CSV, runs/)")
    ap.add_argument("--prefix", default=None, help="run id prefix (default: abl-<date>-<time>)")
    ap.add_argument("--address", default=None, metavar="URL", help="a Ray cluster's job server "
                    "(http://<head>:8265): every preset a Ray job there, side by side (default: one after "
                    "another in this process)")
    ap.add_argument("--max-concurrent", type=int, default=None, help="with --address: runs at once (default: as "
                    "many as the cluster's CPUs and GPUs hold)")
    ap.add_argument("--retries", type=int, default=2, help="with --address: a failed job is submitted again this "
                    "many times")
    args = ap.parse_args(argv)
    require_own_packages()
    unknown = [p for p in args.presets if p not in PRESETS]
    if unknown:
        ap.error(f"unknown preset(s) {unknown}; choose from: {', '.join(sorted(PRESETS))}")
    report = run_ablation(args.presets, args.out, tiny=args.tiny, steps=args.steps, prefix=args.prefix,
                          overrides=overrides, address=args.address, max_concurrent=args.max_concurrent,
                          retries=args.retries)
    print(f"{'preset':<20}{'steps':>6}{'wall s':>8}{'entropy first/last':>21}{'train acc first/last':>23}"
          f"{'eval avg@n first/last':>24}")
    for r in report["runs"]:
        if "error" in r:
            print(f"{r['preset']:<20} FAILED: {r['error']}")
            continue
        print(f"{r['preset']:<20}{r['steps']:>6}{r['seconds']:>8.0f}{_fmt(r['entropy_first']):>12} / {_fmt(r['entropy_last'])}"
              f"{_fmt(r['train_accuracy_first']):>14} / {_fmt(r['train_accuracy_last'])}"
              f"{_fmt(r['eval_avg@n_first']):>15} / {_fmt(r['eval_avg@n_last'])}")
    print(report["png"])
    print(report["csv"])
    return 1 if any("error" in r for r in report["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
