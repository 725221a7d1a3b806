"""Named presets: the paper's settings (DESIGN.md §5) as plain Python objects.

Every preset is the baseline with a few fields changed, so a diff between two presets is the
ablation; each states its lag once (``learner.lag``: on_policy, sync, bounded:N or fixed:k; ``learner.lag_policy``).
Each CPU world scales any preset down (``launch.worlds``: ``--tiny``, ``--reasoning``, ``--shapes``)
keeping what the ablation is about: N_reuse, D_R/D_T (hence N_SGD), the clip range, the entropy rule
and the lag policy. The Sky-T1 recipe's RL stages (another system, not Skywork ablations) live
in ``launch.config.skyt1_presets`` and are registered here.
"""

from __future__ import annotations

from typing import Callable

from actors.config import ActorConfig
from launch.config import DataConfig, RunConfig, StageConfig
from launch.config.skyt1_presets import SKYT1_PRESETS
from learner.config import AdaptiveEntropy, BatchConfig, FixedEntropy, NoEntropy, PolicyLossConfig
from learner.lag_policy import Bounded, Fixed, OnPolicy, Sync
from learner.trainer_config import LearnerConfig


def baseline() -> RunConfig:
    """Skywork-OR1 §4 baseline: D_R 64, gs 16, T 16K, lr 1e-6, τ 1.0, adaptive entropy (tgt 0.2),
    no KL, strict on-policy (N_reuse 1, D_T = D_R, symmetric clip 0.2)."""
    return RunConfig(
        preset="baseline", temperature=1.0, group_size=16,
        actors=ActorConfig(max_model_len=16384 + 2048),
        learner=LearnerConfig(lag=OnPolicy(), batch=BatchConfig(rollout_batch=64, mini_batch=64, n_reuse=1),
                              lr=1e-6, entropy=AdaptiveEntropy(target=0.2)),
        data=DataConfig(stages=[StageConfig(max_tokens=16384)]),
    )


def _with(cfg: RunConfig, name: str, run: dict | None = None, **learner) -> RunConfig:
    """Copy of cfg with run-wide and learner fields replaced, re-validated as a whole."""
    data = cfg.model_dump()
    data.update(run or {}, preset=name)
    data["learner"].update({k: (v.model_dump() if hasattr(v, "model_dump") else v) for k, v in learner.items()})
    return RunConfig.model_validate(data)


def _batch(d_r: int, d_t: int, n_reuse: int = 1) -> BatchConfig:
    return BatchConfig(rollout_batch=d_r, mini_batch=d_t, n_reuse=n_reuse)


def reuse(n_reuse: int, d_r: int, d_t: int, eps_high: float = 0.2, max_lag: int | None = None) -> Callable[[], RunConfig]:
    """Ablation quadruple (N_reuse, D_R, D_T): N_SGD = D_R/D_T * N_reuse. (1, D, D) is on-policy, any other
    bounded:``max_lag`` (default N_SGD)."""
    def make() -> RunConfig:
        name = f"reuse{n_reuse}_dr{d_r}_dt{d_t}" + (f"_eh{eps_high:g}" if eps_high != 0.2 else "")
        batch = _batch(d_r, d_t, n_reuse)
        if n_reuse == 1 and d_r == d_t and eps_high == 0.2:
            return _with(baseline(), name, batch=batch)
        bound = max_lag if max_lag is not None else batch.n_sgd
        return _with(baseline(), name, lag=Bounded(max_lag=bound), batch=batch,
                     loss=PolicyLossConfig(eps_low=0.2, eps_high=eps_high))
    return make


def synchronous(n_reuse: int, d_r: int, d_t: int) -> Callable[[], RunConfig]:
    """(N_reuse, D_R, D_T) with synchronous rollouts (``learner.lag`` sync): each step's batch is sampled by
    the version the step starts at, so the only off-policyness is the within-step lag of the step's own
    N_SGD updates. Everything else is the on-policy baseline's, the symmetric clip 0.2 included: against
    (1, D, D) these differ in the updates per batch alone (the science report's factorial)."""
    def make() -> RunConfig:
        return _with(baseline(), f"sync_reuse{n_reuse}_dr{d_r}_dt{d_t}", lag=Sync(), batch=_batch(d_r, d_t, n_reuse))
    return make


def onpolicy() -> RunConfig:
    return _with(baseline(), "onpolicy")


def offpolicy_reuse4() -> RunConfig:
    """(N_reuse 4, D_R 64, D_T 16): 16 updates per step, clip-higher ε_high 0.28, bounded lag."""
    return reuse(4, 64, 16, eps_high=0.28)().model_copy(update={"preset": "offpolicy_reuse4"})


def offpolicy_guarded() -> RunConfig:
    """offpolicy_reuse4 with the lag guard on (learner.guard, GuardConfig defaults): the run falls back
    to strict on-policy when entropy collapses or mismatch / clipping grow, and returns when healthy.
    Only the guard differs from offpolicy_reuse4, so the two compare the guard alone."""
    cfg = offpolicy_reuse4()
    return _with(cfg, "offpolicy_guarded", guard=cfg.learner.guard.model_copy(update={"enabled": True}))


def clip_higher(eps_high: float) -> Callable[[], RunConfig]:
    def make() -> RunConfig:
        return _with(baseline(), f"cliphigh_{eps_high:g}", lag=Bounded(max_lag=1),
                     loss=PolicyLossConfig(eps_low=0.2, eps_high=eps_high))
    return make


def temperature(tau: float) -> Callable[[], RunConfig]:
    def make() -> RunConfig:
        # one run-wide setting: the actors sample at it and the learner divides its logits by it
        return _with(baseline(), f"temp_{tau:g}", run={"temperature": tau})
    return make


def entropy(kind: str, coef: float = 0.0) -> Callable[[], RunConfig]:
    def make() -> RunConfig:
        rule = {"adaptive": AdaptiveEntropy(target=0.2), "fixed": FixedEntropy(coef=coef), "none": NoEntropy()}[kind]
        return _with(baseline(), f"entropy_{kind}" + (f"_{coef:g}" if kind == "fixed" else ""), entropy=rule)
    return make


def fixed_lag(k: int) -> Callable[[], RunConfig]:
    """Lag as a controlled dose: the baseline with every token trained at update lag exactly k
    (``learner.lag`` fixed:k; fixed:0 is strict on-policy). Only the lag differs between the doses: one
    update per step, the symmetric clip 0.2, the same learning rate."""
    def make() -> RunConfig:
        return _with(baseline(), f"fixedlag_{k}", lag=Fixed(k=k))
    return make


def multistage() -> RunConfig:
    """8K -> 16K -> 32K response budget, online filtering of solved prompts at each stage start."""
    cfg = baseline()
    data = cfg.data.model_copy(update={"online_filter": True, "stages": [
        StageConfig(max_tokens=8192, steps=100), StageConfig(max_tokens=16384, steps=100), StageConfig(max_tokens=32768)]})
    actors = cfg.actors.model_copy(update={"max_model_len": 32768 + 2048})
    return cfg.model_copy(update={"preset": "multistage", "data": data, "actors": actors})


def mixed_math_code() -> RunConfig:
    """Math and code problems in one run, as Skywork-OR1 trains: the baseline, with a code answer
    rewarded 1 only when every test passes (binary like math, so the two kinds share one reward scale).
    The data mixes both (a verl-layout set whose data_source picks the reward; ``--code``: the code world)."""
    cfg = baseline()
    rewards = cfg.rewards.model_copy(update={"code_all_or_nothing": True})
    return cfg.model_copy(update={"preset": "mixed_math_code", "rewards": rewards})


PRESETS: dict[str, Callable[[], RunConfig]] = {
    "baseline": baseline, "onpolicy": onpolicy, "offpolicy_reuse4": offpolicy_reuse4,
    "offpolicy_guarded": offpolicy_guarded, "multistage": multistage, "mixed_math_code": mixed_math_code,
    **{f"reuse{n}_dr{r}_dt{t}": reuse(n, r, t) for n, r, t in
       [(1, 64, 64), (1, 64, 16), (2, 64, 32), (2, 64, 64), (4, 64, 16), (4, 64, 64), (1, 32, 32), (1, 16, 16),
        (4, 256, 64)]},
    **{f"sync_reuse{n}_dr{r}_dt{t}": synchronous(n, r, t) for n, r, t in [(1, 64, 16), (4, 64, 64), (4, 64, 16)]},
    **{f"cliphigh_{e:g}": clip_higher(e) for e in (0.2, 0.25, 0.265, 0.28)},
    **{f"temp_{t:g}": temperature(t) for t in (0.6, 1.0)},
    **{f"fixedlag_{k}": fixed_lag(k) for k in (0, 1, 2, 4, 8)},
    "entropy_adaptive": entropy("adaptive"), "entropy_none": entropy("none"),
    **{f"entropy_fixed_{c:g}": entropy("fixed", c) for c in (1e-4, 5e-4, 1e-3, 5e-3, 1e-2)},
    **SKYT1_PRESETS,
}


def get_preset(name: str) -> RunConfig:
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose from: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]()

