"""Command line shared by the entry scripts: preset -> world -> overrides -> print/save -> run.

Worlds: --tiny, --shapes, --reasoning (one at most).

Heavy modules (Ray, vLLM, DeepSpeed) are imported only after the config is resolved, so
`--help`, `--print-config` and config errors are instant.
"""

from __future__ import annotations

import argparse
import sys

HELP_EPILOG = """\
Overrides: any config field as --section.field VALUE, e.g.
  --steps 50 --learner.lr 1e-6 --learner.entropy.type fixed --learner.entropy.coef 1e-3
  --actors.num_actors 4 --data.model_dir /models/qwen --data.train_path data/math.jsonl
Environment: RAY_ADDRESS (join a cluster; set by `ray job submit`), REDIS_URL (external Redis).
"""


def build_config(argv: list[str], default_preset: str):
    from launch.install_check import require_own_packages
    from launch.overrides import ConfigError, apply_overrides, split_overrides
    from launch.presets import PRESETS, get_preset, scale_to_tiny

    ap = argparse.ArgumentParser(description=f"lagrl run (default preset: {default_preset})",
                                 epilog=HELP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=default_preset, choices=sorted(PRESETS), metavar="NAME",
                    help=f"named preset; one of: {', '.join(sorted(PRESETS))}")
    ap.add_argument("--tiny", action="store_true", help="scale to the tiny CPU world (same ratios)")
    ap.add_argument("--shapes", action="store_true", help="real-size shapes on CPU: Qwen2.5-0.5B architecture with "
                    "random weights, 512-token responses, 3 measured steps (launch/shapes)")
    ap.add_argument("--reasoning", action="store_true", help="the reasoning CPU world: written-out running sums, "
                    "64 -> 128 -> 256-token budgets, truncation and overlong shaping bite (launch/reasoning)")
    ap.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    args, rest = ap.parse_known_args(argv)
    require_own_packages()
    try:
        cfg = get_preset(args.preset)
        worlds = [f"--{w}" for w in ("tiny", "shapes", "reasoning") if getattr(args, w)]
        if len(worlds) > 1:
            raise ValueError(f"{' and '.join(worlds)} are different worlds: pick one")
        if args.tiny:
            cfg = scale_to_tiny(cfg)
        if args.shapes:
            from launch.shapes.preset import scale_to_shapes
            cfg = scale_to_shapes(cfg)
        if args.reasoning:
            from launch.reasoning.preset import scale_to_reasoning
            cfg = scale_to_reasoning(cfg)
        cfg = apply_overrides(cfg, split_overrides(rest))
    except (ConfigError, ValueError, KeyError) as exc:
        ap.exit(2, f"error: {exc}\n")
    return cfg, args.print_config


def config_line(cfg) -> str:
    """The resolved config in one line (all of it: --print-config, and config.json in the run directory)."""
    b, lc = cfg.learner.batch, cfg.learner
    stages = " -> ".join(str(s.max_tokens) for s in cfg.data.stages)
    clip = f"{lc.loss.eps_low:g}/{lc.loss.eps_high:g}"
    advantages = (f"PRIME (PRM lr {lc.prime.prm_lr:g}, filter [{lc.prime.filter_low:g}, {lc.prime.filter_high:g}])"
                  if lc.prime is not None else lc.advantage.estimator)
    return (f"[config] {cfg.preset}{_world(cfg)}: {lc.mode}, D_R {b.rollout_batch} D_T {b.mini_batch} "
            f"N_reuse {b.n_reuse} (N_SGD {b.n_sgd}), max_lag {lc.max_lag}, gs {cfg.group_size}, tau {cfg.temperature:g}, "
            f"budget {stages} tokens, advantages {advantages}, clip {clip}, entropy {lc.entropy.type}, lr {lc.lr:g}, "
            f"{cfg.steps} steps, "
            f"{cfg.actors.num_actors} actor(s), {lc.num_ranks} learner rank(s); "
            f"full config: {cfg.path}/config.json")


def _world(cfg) -> str:
    return next((f" ({w})" for w in ("tiny", "shapes", "reasoning") if getattr(cfg, w)), "")


def main(default_preset: str = "onpolicy", argv: list[str] | None = None) -> None:
    cfg, print_only = build_config(sys.argv[1:] if argv is None else argv, default_preset)
    if print_only:
        print(cfg.model_dump_json(indent=2), flush=True)
        return
    print(config_line(cfg), flush=True)
    from launch.layout import LayoutError
    from launch.run.driver import run
    try:
        run(cfg)
    except LayoutError as exc:          # refused before anything started: the message names the fix
        sys.exit(f"error: {exc}")
