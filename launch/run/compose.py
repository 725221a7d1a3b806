"""From a command line to a RunConfig: preset -> world -> overrides (the entry scripts, the science runner,
the smoke test and the ablation tool all compose a run this way).

Worlds (launch.worlds, one at most): --world NAME, or its alias --NAME (--tiny, --reasoning, --shapes, --code).
Trackers: --tracking tensorboard,wandb,mlflow (or none); default TensorBoard into <run>/tb/.
Nothing heavy is imported here (configs and the worlds' registry only), so ``--help`` and config errors are instant.
"""

from __future__ import annotations

import argparse
import json

from launch.config.overrides import ConfigError, apply_overrides, split_overrides
from launch.config.presets import PRESETS, get_preset
from launch.config.redact import redact
from launch.config.install_check import require_own_packages
from launch.worlds import WORLDS, scale_to_world

HELP_EPILOG = """\
Overrides: any config field as --section.field VALUE, e.g.
  --steps 50 --learner.lr 1e-6 --learner.entropy.type fixed --learner.entropy.coef 1e-3
  --actors.num_actors 4 --data.model_dir /models/qwen --data.train_path data/math.jsonl
Environment: RAY_ADDRESS (join a cluster; set by `ray job submit`), REDIS_URL (external Redis).
"""


def build_config(argv: list[str], default_preset: str):
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
        ap.exit(2, redact(f"error: {exc}\n"))     # a rejected value is echoed: it may be a URL with a password
    return cfg, args.print_config


def _backends_json(text: str) -> str:
    """``tensorboard,wandb`` -> ``["tensorboard", "wandb"]``; ``none`` -> ``[]``."""
    names = [] if text.strip().lower() in ("", "none") else [n.strip() for n in text.split(",")]
    return json.dumps(names)
