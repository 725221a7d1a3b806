"""The command line of the entry scripts (launch/onpolicy.py, launch/offpolicy_reuse4.py, launch/ablate.py):
preset -> world -> overrides (launch.run.compose) -> print/save -> run.

    python launch/onpolicy.py --tiny --steps 20 --learner.lr 2e-4        # --help lists every option

Ray, vLLM and DeepSpeed come in with the driver, imported only once the config is resolved (below), so
``--help``, ``--print-config`` and config errors are instant.
"""

from __future__ import annotations

import json
import sys

from launch.config.layout import LayoutError
from launch.config.redact import redact
from launch.run.compose import build_config
from rewards.code_isolation import SandboxRefused


def config_line(cfg) -> str:
    """The resolved config in one line (all of it: --print-config, and config.json in the run directory)."""
    b, lc = cfg.learner.batch, cfg.learner
    stages = " -> ".join(str(s.max_tokens) for s in cfg.data.stages)
    clip = f"{lc.loss.eps_low:g}/{lc.loss.eps_high:g}"
    advantages = (f"PRIME (PRM lr {lc.prime.prm_lr:g}, filter [{lc.prime.filter_low:g}, {lc.prime.filter_high:g}])"
                  if lc.prime is not None else lc.advantage.estimator)
    world = f" ({cfg.world})" if cfg.world else ""
    return (f"[config] {cfg.preset}{world}: lag {lc.lag}, D_R {b.rollout_batch} D_T {b.mini_batch} "
            f"N_reuse {b.n_reuse} (N_SGD {b.n_sgd}), gs {cfg.group_size}, tau {cfg.temperature:g}, "
            f"budget {stages} tokens, advantages {advantages}, clip {clip}, entropy {lc.entropy.type}, lr {lc.lr:g}, "
            f"{cfg.steps} steps, "
            f"{cfg.actors.num_actors} actor(s), {lc.num_ranks} learner rank(s); "
            f"full config: {cfg.path}/config.json")


def main(default_preset: str = "onpolicy", argv: list[str] | None = None) -> None:
    cfg, print_only = build_config(sys.argv[1:] if argv is None else argv, default_preset)
    if print_only:      # the console gets the redacted config; config.json in the run dir keeps it whole
        print(json.dumps(redact(cfg), indent=2), flush=True)
        return
    print(config_line(cfg), flush=True)
    from launch.run.driver import run       # here, not at the top: Ray, vLLM and DeepSpeed come with it
    try:
        run(cfg)
    except LayoutError as exc:          # refused before anything started: the message names the fix
        sys.exit(f"error: {exc}")
    except SandboxRefused as exc:       # the code sandbox lacks walls here: the message names them and the flag
        sys.exit(str(exc))
