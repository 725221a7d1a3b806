"""``python -m launch.ops.smoke [--device cpu] [--stages N ...] [--out FILE]``: see the package docstring."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from launch.config.install_check import require_own_packages
from launch.ops.smoke import __doc__ as PACKAGE_DOC

STAGES = {1: "versions", 2: "engine", 3: "weights", 4: "learner", 5: "run", 6: "shapes"}
# seconds a stage may take before it is interrupted: a hang (an engine that never starts, a placement that
# never fits) fails its stage instead of the whole command. On a GPU host the command has 8 minutes in all.
LIMITS = {"cpu": {1: 120, 2: 400, 3: 500, 4: 400, 5: 900, 6: 900},
          "cuda": {1: 60, 2: 180, 3: 180, 4: 180, 5: 240, 6: 420}}
# what a stage took when it passed (the H100 of 2026-11-27, the 2-core CPU): a stage is started only when this
# much of --budget-s is left, so a command cut at a host's per-call limit ends with what fitted, not mid-stage
EXPECTED = {"cpu": {1: 5, 2: 60, 3: 60, 4: 20, 5: 150, 6: 60},
            "cuda": {1: 2, 2: 85, 3: 45, 4: 5, 5: 145, 6: 190}}


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m launch.ops.smoke", description=PACKAGE_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                    help="auto: cuda when torch sees a GPU. On CPU the stages run in fp32 "
                    "(bf16 is not what a CPU run uses)")
    ap.add_argument("--stages", type=int, nargs="+", choices=sorted(STAGES), default=None,
                    help="which stages (default: 1-6 on cuda, 1-5 on cpu)")
    ap.add_argument("--steps", type=int, default=5, help="learner steps of stage 5's run")
    ap.add_argument("--shapes", choices=["1.5b", "small"], default="1.5b",
                    help="stage 6's model: Qwen2.5-1.5B's shapes, or a small one to check the stage's code on a CPU")
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch directory: engines' files, stage 6's multi-GB model (default: next to --out; with "
                    "$OUT set, a directory outside it, so the large model never lands in what comes back)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON summary, rewritten after every stage (default "
                    "$OUT/smoke.json when $OUT is set, else runs/smoke-<time>/smoke.json)")
    ap.add_argument("--budget-s", "--budget", type=float, default=480.0,
                    help="wall time the whole command must fit in: a stage whose usual time (EXPECTED) no longer "
                    "fits is skipped, and a stage never runs past it")
    return ap.parse_args(argv)


def output_paths(out: Path | None, work: Path | None, env: dict) -> tuple[Path, Path]:
    """(the JSON summary, the scratch directory): a device's $OUT gets the summary, never the scratch."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if out is None:
        out = Path(env["OUT"]) / "smoke.json" if env.get("OUT") else Path("runs") / f"smoke-{stamp}" / "smoke.json"
    if work is None:
        work = Path(tempfile.gettempdir()) / f"lagrl-smoke-{stamp}" if env.get("OUT") else out.parent / "work"
    return out, work


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    require_own_packages()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")     # the stage lines are the console
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    out, work = output_paths(args.out, args.work, dict(os.environ))
    work.mkdir(parents=True, exist_ok=True)
    stages = args.stages or sorted(n for n in STAGES if device == "cuda" or n != 6)

    # the stages import vLLM, DeepSpeed and torch: after the arguments (--help is instant) and the environment
    # above (vLLM reads VLLM_LOGGING_LEVEL when it is first imported)
    from launch.ops.smoke.context import Context
    from launch.ops.smoke.engine_stages import engine_stage, weights_stage
    from launch.ops.smoke.learner_stage import learner_stage
    from launch.ops.smoke.report import Report
    from launch.ops.smoke.run_stage import run_stage
    from launch.ops.smoke.shapes_stage import shapes_stage
    from launch.ops.smoke.versions import versions_stage

    ctx = Context(device=device, work=work.resolve(), steps=args.steps)
    report = Report(device, out, args.budget_s)
    report.notes = ctx.notes
    bodies = {1: versions_stage, 2: engine_stage, 3: weights_stage, 4: learner_stage, 5: run_stage,
              6: lambda c: shapes_stage(c, args.shapes)}
    print(f"[smoke] device {device}, stages {stages}, work {work}", flush=True)
    try:
        for n in sorted(STAGES):
            if n not in stages:
                if n == 6 and device == "cpu" and args.stages is None:
                    report.skip(6, STAGES[6], "GPU only (check its code on a CPU with --stages 6 --shapes small)")
                continue
            left = report.time_left()
            if left < EXPECTED[device][n]:
                report.skip(n, STAGES[n], f"--budget-s: {left:.0f} s left, the stage usually takes "
                                          f"{EXPECTED[device][n]} s")
                continue
            report.run(n, STAGES[n], lambda n=n: bodies[n](ctx), min(LIMITS[device][n], left))
    finally:
        ctx.close()
        summary = report.write()
        print(json.dumps(summary, indent=1, default=str), flush=True)
        passed = sum(s["status"] == "PASS" for s in summary["stages"].values())
        print(f"[smoke] {'PASS' if report.passed else 'FAIL'}: {passed} of {len(summary['stages'])} stages passed "
              f"in {summary['wall_s']:.0f} s; summary in {out}", flush=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
