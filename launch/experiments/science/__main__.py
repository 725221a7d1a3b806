"""The science report: the on/off-policy findings of Skywork-OR1 and DAPO, checked with real runs.

    .venv/bin/python -m launch.experiments.science                          # every finding, 3 seeds, 20 steps: ~2 h 42 min
    .venv/bin/python -m launch.experiments.science --findings reuse --seeds 8          # the reuse finding alone: ~31 min
    .venv/bin/python -m launch.experiments.science --findings reuse temperature --seeds 3 --steps 40
    .venv/bin/python -m launch.experiments.science --seeds 5 reuse=10                   # 10 seeds for reuse, 5 for the rest
    .venv/bin/python -m launch.experiments.science --full --out runs/science-gpu   # the paper-scale presets (GPU cluster)
    .venv/bin/python -m launch.experiments.science --report-only --out runs/science  # rebuild the report from its runs

Writes ``<out>/report.html`` (self-contained: figures inlined) and ``<out>/report.csv`` (a verdict row
per check) and prints the verdict table. Each finding's arms differ in one factor: the learning rate
of a comparison is the smallest its arms would get from the world's scaling (the tiny world gives
runs with more updates per step a smaller one), set for every arm, and the report says which.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from launch.config.install_check import require_own_packages
from launch.experiments.science.findings import FINDINGS, Finding, finding, science_worlds
from launch.experiments.science.runner import config_of, entropy_split_of, spec_for

CHECKOUT = Path(__file__).resolve().parents[3]


def fair_overrides(findings: list[Finding], world: str | None, steps: int) -> dict[str, tuple[str, ...]]:
    """finding key -> overrides every arm gets: the comparison's one learning rate, no learning-rate warm-up
    (the learner's warm-up counts optimizer updates: over the same steps, an arm of 16 updates a step would
    finish it inside step 0 while the on-policy arm spends its first steps in it, a second factor in exactly
    the comparisons about updates per step), 16 samples per held-out problem at the final evaluation for a
    finding that checks pass@16, and, for a finding with ``final_model`` in a world with an entropy split, a
    checkpoint at its last step."""
    out = {}
    for f in findings:
        lrs = [config_of(spec_for(f, arm, 0, steps, world)).learner.lr for arm in f.arms]
        last = str(f.steps_for(steps))
        split = f.final_model and entropy_split_of(world or f.world) is not None
        keep = ("--learner.checkpoint_every", last) if split else ()
        pass_at_16 = ("--data.final_eval_n", "16") if any(c.statistic == "pass16_final" for c in f.checks) else ()
        out[f.key] = (*f.overrides, "--learner.lr", repr(min(lrs)), "--learner.warmup_steps", "0", *pass_at_16, *keep)
    return out


def parse_seeds(values: list[str], keys: list[str]) -> tuple[int, dict[str, int]]:
    """``["5", "reuse=10"]`` -> (5, {"reuse": 10}): a default seed count and per-finding ones."""
    default, per = 3, {}
    for v in values:
        key, eq, n = v.rpartition("=")
        if not n.isdigit() or int(n) < 1 or (eq and key not in keys):
            raise SystemExit(f"--seeds {v!r}: give N or FINDING=N with N >= 1 and FINDING one of {keys}")
        if eq:
            per[key] = int(n)
        else:
            default = int(n)
    return default, per


def parser() -> argparse.ArgumentParser:
    """The command line; ``--world`` offers the registry's science worlds (launch.config.worlds)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--findings", nargs="+", default=["all"], help=f"{[f.key for f in FINDINGS]} or all")
    ap.add_argument("--seeds", nargs="+", default=["3"], help="seeds per arm (>= 2 for a verdict; 3 by default), "
                    "and per finding as FINDING=N, e.g. '5 reuse=10'")
    ap.add_argument("--steps", type=int, default=20, help="learner steps per run, or a finding's own minimum where "
                    "it needs more (the reuse-4 findings of entropy control and clip-higher: 40). On 2 cores, two "
                    "runs side by side, a 20-step slips run takes 130-240 s, a 40-step reuse-4 run ~9.5 min: "
                    "the reuse finding alone with 8 seeds 31 min, the lag finding with 5 seeds 38 min; every "
                    "finding ('--seeds 5 reuse=8 multistage=3 truncation_mask=3') 4 h 7 min, at 3 seeds 2 h 42 min")
    ap.add_argument("--world", choices=science_worlds(), default=None,
                    help="run every finding in this world (default: each finding's own)")
    ap.add_argument("--full", action="store_true", help="the paper-scale presets as they are (a GPU cluster)")
    ap.add_argument("--out", type=Path, default=Path("runs/science"))
    ap.add_argument("--report-only", action="store_true", help="no runs: the report from the runs in --out")
    ap.add_argument("--address", default=None, metavar="URL",
                    help="an existing Ray cluster's job server (http://<head>:8265): every run is a Ray job placed "
                    "by Ray, its files coming back through the job's log (no shared filesystem). Default: one local "
                    "Ray that the report starts for itself and every run joins")
    ap.add_argument("--max-concurrent", "--jobs", dest="max_concurrent", type=int, default=None,
                    help="runs at once (default: on a cluster as many as its CPUs and GPUs hold at what one run asks; "
                    "locally 2 on the CPU worlds, where one run keeps about one core busy, 1 with --full)")
    ap.add_argument("--retries", type=int, default=2, help="a run whose job fails (or whose node dies) is submitted "
                    "again this many times, each attempt in the report's log")
    ap.add_argument("--cache", default=None, metavar="DIR",
                    help="the worlds' cache on every node (LAGRL_CACHE; built there once). Default: this checkout's "
                    "locally, /tmp/lagrl-cache on a cluster")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every arm, e.g. data.eval_max_problems=64 (repeatable)")
    return ap


@contextmanager
def job_runner(args, specs: list):
    """The runs' Ray: the cluster at ``--address``, or a local head started for this report and stopped after it."""
    from launch.experiments.science.jobs import JobRunner, largest_needs
    from launch.experiments.science.local_head import LocalHead

    if args.address:
        yield JobRunner(args.address, args.out, max_concurrent=args.max_concurrent, retries=args.retries,
                        cache_dir=args.cache or "/tmp/lagrl-cache")
        return
    width = args.max_concurrent or (1 if args.full else 2)
    needs = largest_needs(specs)["cpus"]
    head = LocalHead.start(cpus=max(os.cpu_count() or 1, math.ceil(width * needs)), log_dir=args.out)
    try:
        yield JobRunner(head.address, args.out, max_concurrent=width, retries=args.retries, headers=head.headers,
                        local=True, cache_dir=args.cache or os.environ.get("LAGRL_CACHE") or str(CHECKOUT / ".cache"))
    finally:
        head.stop()


@contextmanager
def stop_on_sigterm():
    """SIGTERM (``kill``, a scheduler's preemption) stops the report as Ctrl-C does: its jobs and its local Ray
    are stopped on the way out (``jobs.JobRunner.run_all``, :func:`job_runner`). The handler before is put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    require_own_packages()
    extra = tuple(x for kv in args.override for x in (f"--{kv.partition('=')[0]}", kv.partition("=")[2]))

    # here, after the arguments: the report and runner bring torch and Ray (--help and a bad flag stay instant)
    from launch.experiments.science.report import (
        correct_for_checks,
        covariance_png,
        dose_response_png,
        evaluate,
        figure_png,
        write_csv,
        write_html,
    )
    from launch.experiments.science.runner import one_run_per_config, read_rows, run_all, spec_for

    chosen = list(FINDINGS) if args.findings == ["all"] else [finding(k) for k in args.findings]
    default_seeds, per_finding = parse_seeds(args.seeds, [f.key for f in FINDINGS])
    seeds = {f.key: per_finding.get(f.key, default_seeds) for f in chosen}
    world_of = {f.key: None if args.full else (args.world or f.world) for f in chosen}
    chosen = [replace(f, overrides=(*f.overrides, *extra)) for f in chosen]
    fair = {f.key: f.overrides for f in chosen} if args.full else {}
    for f in chosen:
        if not args.full:
            fair.update(fair_overrides([f], world_of[f.key], args.steps))
    fair_findings = [replace(f, overrides=fair[f.key], world=world_of[f.key] or f.world) for f in chosen]
    specs = one_run_per_config({(f.key, arm.name, seed): spec_for(f, arm, seed, args.steps, world_of[f.key])
                                for f in fair_findings for arm in f.arms for seed in range(seeds[f.key])})
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not args.report_only:
        with stop_on_sigterm():
            done = run_all(list(specs.values()), args.out, lambda: job_runner(args, list(specs.values())))
        failed = {k: v["error"] for k, v in done.items() if v["error"]}
        if failed:
            print(f"[science] {len(failed)} run(s) failed:", flush=True)
            for key, error in failed.items():
                print(f"[science] {key}: {error}", flush=True)

    results, figures, dose_figures, covariance_figures = [], {}, {}, {}
    for f in fair_findings:
        rows_by_arm = {}
        for arm in f.arms:
            runs = []
            for seed in range(seeds[f.key]):
                path = args.out / "runs" / specs[(f.key, arm.name, seed)].key
                runs.append(read_rows(path) if (path / "summary.json").exists() else None)   # keeps seed order
            rows_by_arm[arm.name] = runs
        results += evaluate(f, rows_by_arm)
        figures[f.key] = figure_png(f, rows_by_arm)
        if (dose := dose_response_png(f, rows_by_arm)) is not None:
            dose_figures[f.key] = dose
        if (covariance := covariance_png(rows_by_arm)) is not None:
            covariance_figures[f.key] = covariance
    correct_for_checks(results, {(f, arm): spec.key for (f, arm, seed), spec in specs.items() if seed == 0})
    lrs = ", ".join(f"{f.key} lr {f.overrides[f.overrides.index('--learner.lr') + 1]}" for f in fair_findings
                    if "--learner.lr" in f.overrides)
    more = ", ".join(f"{k} {n}" for k, n in seeds.items() if n != default_seeds)
    longer = "".join(f" ({f.key}: {f.steps_for(args.steps)})" for f in fair_findings
                     if f.steps_for(args.steps) > args.steps)
    preamble = (f"{default_seeds} seeds per arm{f' ({more})' if more else ''}, {args.steps} learner steps per run{longer}, "
                f"{'paper-scale presets' if args.full else 'CPU worlds'}; one learning rate per comparison "
                f"({lrs or 'the presets'}){'' if args.full else ', constant from the first update (no warm-up: the learner counts its warm-up in optimizer updates, which arms with more updates per step would finish sooner)'}. Verdict: a two-sided 95% t-interval of the mean paired (by seed) "
                f"difference on the expected side of 0 (agrees), on the other (disagrees), or containing 0; a dose-"
                f"response check judges the per-seed least-squares slopes the same way. Each effect is "
                f"given with the half-width of that interval. Every check of the report is one family: beside "
                f"each raw verdict, the Holm-Bonferroni adjusted one (family-wise level 0.05; its p-value times "
                f"the number of checks not yet passed, in increasing order); checks whose reference arm is the "
                f"same runs as another finding's are marked: their verdicts are correlated.")
    html = write_html(results, figures, args.out / "report.html", title="lagrl science report", preamble=preamble,
                      dose_figures=dose_figures, covariance_figures=covariance_figures)
    table = write_csv(results, args.out / "report.csv")
    for r in results:
        print(f"[verdict] {r.finding.key}: {r.claim}: {r.line()}; Holm-adjusted: {r.verdict_holm} "
              f"(p {r.p_holm:.3g})")
    print(f"[science] report {html}\n[science] csv {table}\n[science] {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
