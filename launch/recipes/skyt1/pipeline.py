"""The Sky-T1-7B recipe as one command: SFT -> RL (PRIME) -> SFT -> RL (RLOO), each stage's output the
next one's input (NovaSky 2025; ``launch.config.skyt1_presets``). The same four stages by hand:

    python -m launch.recipes.sft --model_dir BASE --train_path sft1.jsonl --out OUT/sft1
    python launch/ablate.py --preset skyt1_prime --data.model_dir OUT/sft1 --run_dir OUT --run_id rl1-prime ...
    python -m launch.recipes.sft --model_dir OUT/rl1-prime/checkpoints/<latest>/hf --train_path sft2.jsonl --out OUT/sft2
    python launch/ablate.py --preset skyt1_rloo --data.model_dir OUT/sft2 --run_dir OUT --run_id rl2-rloo ...

    python -m launch.recipes.skyt1 --out runs/skyt1 --model_dir BASE --sft1_data sft1.jsonl --sft2_data sft2.jsonl \\
        --rl_args "--data.train_path math.jsonl --data.eval_path aime24 --data.eval_n 8"
    python -m launch.recipes.skyt1 --tiny --out runs/skyt1-tiny     # CPU world; SFT data written from its task

Each stage runs as its own process (an SFT process group, then a Ray driver) and is skipped when its
output is already complete, so a pipeline that stopped resumes at the stage it was in (an RL stage
resumes from its own checkpoints). The second SFT starts from the PRIME stage's final weights
(``--sft2_from rl``, the chain); the blog restarted it from the base model with data distilled from
the PRIME model (``--sft2_from base``). ``OUT/pipeline.json`` lists every stage's output and, for the
RL stages, held-out accuracy and pass@k before (= the SFT stage's model) and after, plus the PRIME
stage's PRM figures. With ``--tiny`` and no SFT data, each SFT stage gets 512 correct traces of the tiny
task's training problems (disjoint halves, never the held-out split), written under OUT.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from launch.config.install_check import require_own_packages
from launch.config.redact import redact      # --rl_args may carry --buffer.redis_url with its password
from launch.run.spec import RunSpec, run_process
from launch.worlds.tiny.task import read_problems
from learner.checkpoint import latest_checkpoint
from rewards.problems import write_jsonl

REPO = Path(__file__).resolve().parents[3]
TINY_SFT_ARGS = "--epochs 3 --batch_size 32 --lr 3e-4"     # Sky-T1's 3 epochs: 16 updates each on 512 traces
TINY_SFT_EXAMPLES = 512


def write_tiny_sft_data(out: Path, train_path: Path) -> tuple[str, str]:
    """Two JSONL files of correct tiny-task traces for the two SFT stages: disjoint slices of the
    training split (the held-out problems never appear in it)."""
    train = read_problems(train_path)
    if len(train) < 2 * TINY_SFT_EXAMPLES:
        raise ValueError(f"{train_path}: {len(train)} problems, the two SFT stages need {2 * TINY_SFT_EXAMPLES}")
    paths = []
    for i, name in enumerate(("sft1.jsonl", "sft2.jsonl")):
        chunk = train[i * TINY_SFT_EXAMPLES:(i + 1) * TINY_SFT_EXAMPLES]
        write_jsonl([{"prompt": p.prompt, "response": p.solution} for p in chunk], out / name)
        paths.append(str(out / name))
    return paths[0], paths[1]


def final_weights(run_path: Path) -> Path:
    """The HF directory of a finished RL run's newest committed checkpoint."""
    ckpt = latest_checkpoint(run_path)
    if ckpt is None or not (ckpt / "hf" / "config.json").exists():
        raise FileNotFoundError(f"{run_path}: no committed checkpoint with hf/ weights")
    return ckpt / "hf"


def rl_stage_record(run_path: Path) -> dict:
    """Accuracy and pass@k of the first and last evaluation of an RL run (its ``summary.json``)."""
    summary = json.loads((run_path / "summary.json").read_text())
    evals = summary.get("evals") or []
    return {"run_path": str(run_path), "steps": summary["steps"], "stop_reason": summary["stop_reason"],
            "accuracy": summary.get("accuracy"), "before": _eval_figures(evals[0]) if evals else None,
            "after": _eval_figures(evals[-1]) if evals else None, "prime": summary.get("prime"),
            "weights": str(final_weights(run_path))}


def _eval_figures(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith("eval/pass@") or k in ("eval/avg@n", "step")}


def _echo(cmd: list[str]) -> None:
    print(f"[pipeline] {shlex.join(redact(cmd))}", flush=True)


def _run(cmd: list[str]) -> None:
    _echo(cmd)
    subprocess.run(cmd, check=True, cwd=REPO)


def sft_stage(model_dir: str, data: str, out: Path, extra: str) -> dict:
    if not (out / "sft.json").exists():
        _run([sys.executable, "-m", "launch.recipes.sft", "--model_dir", model_dir, "--train_path", data, "--out", str(out),
              *shlex.split(extra)])
    summary = json.loads((out / "sft.json").read_text())
    return {"model": str(out), "from": model_dir, "loss_first": summary["loss_first"],
            "loss_last": summary["loss_last"], "updates": summary["updates"]}


def rl_stage(preset: str, model_dir: str, out: Path, run_id: str, tiny: bool, extra: str) -> dict:
    run_path = out / run_id
    done = (run_path / "summary.json").exists() and \
        json.loads((run_path / "summary.json").read_text())["stop_reason"] == "completed"
    if not done:       # the ordinary entry script, as a process of its own (launch.run.spec)
        spec = RunSpec(preset, ("--data.model_dir", model_dir, *shlex.split(extra)), world="tiny" if tiny else None,
                       run_id=run_id)
        _echo(spec.command(out))
        if rc := run_process(spec, out, cwd=REPO):
            raise subprocess.CalledProcessError(rc, spec.command(out))
    return rl_stage_record(run_path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="directory of every stage's output")
    ap.add_argument("--model_dir", help="base model (HF dir); --tiny: the tiny world's model")
    ap.add_argument("--tiny", action="store_true", help="RL stages scaled to the tiny CPU world")
    ap.add_argument("--sft1_data", help="JSONL prompt/response pairs of the first SFT (--tiny: written if not given)")
    ap.add_argument("--sft2_data", help="JSONL prompt/response pairs of the second SFT (--tiny: written if not given)")
    ap.add_argument("--sft2_from", choices=("rl", "base"), default="rl",
                    help="second SFT starts from the PRIME stage's weights (chain) or the base model (blog)")
    ap.add_argument("--sft_args", default=None,
                    help=f"extra launch.recipes.sft options for both SFT stages (--tiny default: {TINY_SFT_ARGS!r})")
    ap.add_argument("--rl_args", default="", help="extra options for both RL stages (e.g. --data.train_path)")
    ap.add_argument("--prime_args", default="", help="extra options of the PRIME stage")
    ap.add_argument("--rloo_args", default="", help="extra options of the RLOO stage")
    args = ap.parse_args(argv)
    require_own_packages()
    if not args.tiny and (args.model_dir is None or args.sft1_data is None or args.sft2_data is None):
        ap.error("--model_dir, --sft1_data and --sft2_data are required unless --tiny")
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.model_dir
    if args.tiny:
        from launch.worlds.tiny.build import ensure_tiny_world    # only with --tiny: it imports torch
        world = ensure_tiny_world()
        base = base or str(world.model_dir)
        if args.sft1_data is None or args.sft2_data is None:
            written = write_tiny_sft_data(args.out, world.train_path)
            args.sft1_data, args.sft2_data = args.sft1_data or written[0], args.sft2_data or written[1]
        if args.sft_args is None:
            args.sft_args = TINY_SFT_ARGS
    args.sft_args = args.sft_args or ""
    stages = {"base": base}
    stages["sft1"] = sft_stage(base, args.sft1_data, args.out / "sft1", args.sft_args)
    stages["rl1_prime"] = rl_stage("skyt1_prime", stages["sft1"]["model"], args.out, "rl1-prime", args.tiny,
                                   f"{args.rl_args} {args.prime_args}")
    sft2_from = stages["rl1_prime"]["weights"] if args.sft2_from == "rl" else base
    stages["sft2"] = sft_stage(sft2_from, args.sft2_data, args.out / "sft2", args.sft_args)
    stages["rl2_rloo"] = rl_stage("skyt1_rloo", stages["sft2"]["model"], args.out, "rl2-rloo", args.tiny,
                                  f"{args.rl_args} {args.rloo_args}")
    (args.out / "pipeline.json").write_text(json.dumps(stages, indent=1))
    for name in ("rl1_prime", "rl2_rloo"):
        s = stages[name]
        print(f"[pipeline] {name}: held-out avg@n {s['accuracy'][0]:.3f} -> {s['accuracy'][1]:.3f} "
              f"(weights {s['weights']})", flush=True)
    print(f"[pipeline] stages: {args.out / 'pipeline.json'}", flush=True)
    return stages


if __name__ == "__main__":
    main()
