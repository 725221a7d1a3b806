"""Command line shared by the entry scripts: preset -> world -> overrides -> print/save -> run.

Worlds (launch.worlds, one at most): --world NAME, or its alias --NAME (--tiny, --reasoning, --shapes, --code).
Trackers: --tracking tensorboard,wandb,mlflow (or none); default TensorBoard into <run>/tb/.

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
    from launch.presets import PRESETS, get_preset
    from launch.worlds import WORLDS, scale_to_world

    ap = argparse.ArgumentParser(description=f"lagrl run (default preset: {default_preset})",
                                 epilog=HELP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=default_preset, choices=sorted(PRESETS), metavar="NAME",
                    help=f"named preset; one of: {', '.join(sorted(PRESETS))}")
    ap.add_argument("--world", dest="worlds", action="append", choices=sorted(WORLDS), default=[],
                    help="scale the preset to this CPU world (launch/worlds)")
    for name, world in WORLDS.items():
        ap.add_argument(f"--{name}", dest="worlds", action="append_const", const=name, help=world.help)
    ap.add_argument("--tracking", metavar="LIST", default=None,
                    help="experiment trackers, any of tensorboard,wandb,mlflow (comma-separated) or none; "
                    "default tensorboard into <run>/tb/ (launch.run.tracking)")
    ap.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    args, rest = ap.parse_known_args(argv)
    require_own_packages()
    try:
        cfg = get_preset(args.preset)
        worlds = sorted(set(args.worlds))
        if len(worlds) > 1:
            raise ValueError(f"{' and '.join('--' + w for w in worlds)} are different worlds: pick one")
        if worlds:
            cfg = scale_to_world(cfg, worlds[0])
        tracking = [] if args.tracking is None else [("tracking.backends", _backends_json(args.tracking))]
        cfg = apply_overrides(cfg, tracking + split_overrides(rest))
    except (ConfigError, ValueError, KeyError) as exc:
        from launch.run.redact import redact     # a rejected value is echoed: it may be a URL with a password
        ap.exit(2, redact(f"error: {exc}\n"))
    return cfg, args.print_config


def _backends_json(text: str) -> str:
    """``tensorboard,wandb`` -> ``["tensorboard", "wandb"]``; ``none`` -> ``[]``."""
    import json

    names = [] if text.strip().lower() in ("", "none") else [n.strip() for n in text.split(",")]
    return json.dumps(names)


def config_line(cfg) -> str:
    """The resolved config in one line (all of it: --print-config, and config.json in the run directory)."""
    b, lc = cfg.learner.batch, cfg.learner
    stages = " -> ".join(str(s.max_tokens) for s in cfg.data.stages)
    clip = f"{lc.loss.eps_low:g}/{lc.loss.eps_high:g}"
    advantages = (f"PRIME (PRM lr {lc.prime.prm_lr:g}, filter [{lc.prime.filter_low:g}, {lc.prime.filter_high:g}])"
                  if lc.prime is not None else lc.advantage.estimator)
    world = f" ({cfg.world})" if cfg.world else ""
    return (f"[config] {cfg.preset}{world}: {lc.mode}, D_R {b.rollout_batch} D_T {b.mini_batch} "
            f"N_reuse {b.n_reuse} (N_SGD {b.n_sgd}), max_lag {lc.max_lag}, gs {cfg.group_size}, tau {cfg.temperature:g}, "
            f"budget {stages} tokens, advantages {advantages}, clip {clip}, entropy {lc.entropy.type}, lr {lc.lr:g}, "
            f"{cfg.steps} steps, "
            f"{cfg.actors.num_actors} actor(s), {lc.num_ranks} learner rank(s); "
            f"full config: {cfg.path}/config.json")


def main(default_preset: str = "onpolicy", argv: list[str] | None = None) -> None:
    cfg, print_only = build_config(sys.argv[1:] if argv is None else argv, default_preset)
    if print_only:      # the console gets the redacted config; config.json in the run dir keeps it whole
        import json

        from launch.run.redact import redact
        print(json.dumps(redact(cfg), indent=2), flush=True)
        return
    print(config_line(cfg), flush=True)
    from launch.layout import LayoutError
    from launch.run.driver import run
    from rewards.code_isolation import SandboxRefused
    try:
        run(cfg)
    except LayoutError as exc:          # refused before anything started: the message names the fix
        sys.exit(f"error: {exc}")
    except SandboxRefused as exc:       # the code sandbox lacks walls here: the message names them and the flag
        sys.exit(str(exc))
