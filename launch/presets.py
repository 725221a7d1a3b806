"""Named presets: the paper's settings (DESIGN.md §5) as plain Python objects.

Every preset is the baseline with a few fields changed, so a diff between two presets is the
ablation. `scale_to_tiny` shrinks any preset to the CPU world while keeping what the ablation
is about: N_reuse, D_R/D_T (hence N_SGD), the group size, the clip range, the entropy rule and
the mode. The Sky-T1 recipe's RL stages (another system, not Skywork ablations) live in
``launch.presets_skyt1`` and are registered here.
"""

from __future__ import annotations

from typing import Callable

from actors.config import ActorConfig
from launch.config import DataConfig, RunConfig, StageConfig
from launch.presets_skyt1 import SKYT1_PRESETS
from learner.config import AdaptiveEntropy, BatchConfig, FixedEntropy, NoEntropy, PolicyLossConfig
from learner.trainer_config import LearnerConfig


def baseline() -> RunConfig:
    """Skywork-OR1 §4 baseline: D_R 64, gs 16, T 16K, lr 1e-6, τ 1.0, adaptive entropy (tgt 0.2),
    no KL, strict on-policy (N_reuse 1, D_T = D_R, symmetric clip 0.2)."""
    return RunConfig(
        preset="baseline", temperature=1.0, group_size=16,
        actors=ActorConfig(max_model_len=16384 + 2048),
        learner=LearnerConfig(mode="on_policy", batch=BatchConfig(rollout_batch=64, mini_batch=64, n_reuse=1),
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
    """Ablation quadruple (N_reuse, D_R, D_T): N_SGD = D_R/D_T * N_reuse. (1, D, D) is on-policy."""
    def make() -> RunConfig:
        name = f"reuse{n_reuse}_dr{d_r}_dt{d_t}" + (f"_eh{eps_high:g}" if eps_high != 0.2 else "")
        batch = _batch(d_r, d_t, n_reuse)
        if n_reuse == 1 and d_r == d_t and eps_high == 0.2:
            return _with(baseline(), name, batch=batch)
        return _with(baseline(), name, mode="off_policy", batch=batch,
                     max_lag=max_lag if max_lag is not None else batch.n_sgd,
                     loss=PolicyLossConfig(eps_low=0.2, eps_high=eps_high))
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
        return _with(baseline(), f"cliphigh_{eps_high:g}", mode="off_policy", max_lag=1,
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
    (``LearnerConfig.fixed_lag``; k = 0 is strict on-policy). Only the lag differs between the
    doses: one update per step, the symmetric clip 0.2, the same learning rate."""
    def make() -> RunConfig:
        lag = {"fixed_lag": k} | ({"mode": "off_policy", "max_lag": k} if k else {})
        return _with(baseline(), f"fixedlag_{k}", **lag)
    return make


def multistage() -> RunConfig:
    """8K -> 16K -> 32K response budget, online filtering of solved prompts at each stage start."""
    cfg = baseline()
    data = cfg.data.model_copy(update={"online_filter": True, "stages": [
        StageConfig(max_tokens=8192, steps=100), StageConfig(max_tokens=16384, steps=100), StageConfig(max_tokens=32768)]})
    actors = cfg.actors.model_copy(update={"max_model_len": 32768 + 2048})
    return cfg.model_copy(update={"preset": "multistage", "data": data, "actors": actors})


PRESETS: dict[str, Callable[[], RunConfig]] = {
    "baseline": baseline, "onpolicy": onpolicy, "offpolicy_reuse4": offpolicy_reuse4,
    "offpolicy_guarded": offpolicy_guarded, "multistage": multistage,
    **{f"reuse{n}_dr{r}_dt{t}": reuse(n, r, t) for n, r, t in
       [(1, 64, 64), (1, 64, 16), (2, 64, 32), (2, 64, 64), (4, 64, 16), (4, 64, 64), (1, 32, 32), (1, 16, 16),
        (4, 256, 64)]},
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


# The tiny CPU world: 16 tokens per response, ~0.5M-parameter model, 2 cores.
TINY_ROLLOUT_UNIT = 32         # D_R 64 -> 32 (and D_T scaled by the same factor)
TINY_LR = {"grpo": 5e-4, "rloo": 2e-4}   # policy lr by advantage estimator (measured, see scale_to_tiny)
TINY_PRM_LR = 1e-4             # PRIME's PRM in the tiny world (measured, see scale_to_tiny)
TINY_PRIME_LR = 1e-5           # the policy under PRIME in the tiny world (measured, see scale_to_tiny)


def scale_batch(batch: BatchConfig, rollout_unit: int) -> BatchConfig:
    """D_R down to ``rollout_unit`` and D_T by the same factor: D_R/D_T, N_reuse and N_SGD are kept."""
    factor = max(batch.rollout_batch // rollout_unit, 1)
    if batch.mini_batch % factor:
        raise ValueError(f"cannot scale D_T={batch.mini_batch} by 1/{factor} keeping the ratio")
    return batch.model_copy(update=dict(rollout_batch=batch.rollout_batch // factor,
                                        mini_batch=batch.mini_batch // factor))


def scale_to_tiny(cfg: RunConfig) -> RunConfig:
    """Shrink batches to D_R 32 keeping D_R/D_T, N_reuse and the group size (the rollouts per prompt
    are part of a recipe: Skywork's 16, Sky-T1's 4 and 8); tiny model, short responses, CPU engines.

    lr 5e-4 / sqrt(N_SGD) (RLOO: 2e-4) with a 10-update warm-up. Without the warm-up Adam's first step
    (m/sqrt(v) ~ sign(g)) moves every weight by the full lr and the tiny policy loses most of its
    accuracy before RL can help; without the 1/sqrt(N_SGD) a 0.5M-parameter model taking 16
    updates per step collapses (measured: reuse-4 at 5e-4 falls from 0.28 to 0.09 avg@4, at 1e-4
    it climbs to 0.52). The paper keeps lr fixed across ablations: pass --learner.lr to do so.

    RLOO (skyt1_rloo, 8 rollouts, no filtering), 60 steps, held-out avg@4 every 10: at 5e-4 it rose to
    0.32 and fell back to 0.20-0.25, at 1e-3 it collapsed to 0.05, at 2e-4 it rose steadily 0.25 -> 0.37.
    PRIME: the PRM gets lr 1e-4 and the policy 1e-5 (``TINY_PRM_LR``, ``TINY_PRIME_LR``, both measured), not
    PRIME's 1:2. Trained offline on a fixed tiny policy's rollouts (4 per prompt, PRIME's filter), the PRM's
    held-out pairwise accuracy over 30 batches stayed at 0.41-0.51 at lr 1e-3 and 3e-4 (each update flattens
    what it saw, so rare wrong answers gain on the right ones) and at 0.58-0.68 at 3e-5 to 2e-4. In a run,
    the policy follows the process rewards to exactly those rare wrong answers: at a policy lr of 5e-4
    held-out avg@4 fell 0.275 -> 0.081 in 10 steps, at 5e-5 (PRIME's ratio) the PRM's held-out pairwise
    accuracy fell below chance after ~8 steps (0.2-0.4) and avg@4 0.27 -> 0.21; at 1e-5 the PRM stays
    ahead (pairwise 0.58-0.60 over 10 steps, two runs) while the policy barely moves."""
    tiny_batch = scale_batch(cfg.learner.batch, TINY_ROLLOUT_UNIT)
    learner = cfg.learner.model_dump()
    tiny_lr = TINY_LR[cfg.learner.advantage.estimator] / tiny_batch.n_sgd ** 0.5
    learner.update(batch=tiny_batch.model_dump(), lr=tiny_lr, warmup_steps=10,
                   weight_decay=0.0, micro_batch_tokens=4096, checkpoint_every=5, num_ranks=1, zero_stage=0,
                   block_ms=200)
    if cfg.learner.prime is not None:
        learner.update(lr=TINY_PRIME_LR / tiny_batch.n_sgd ** 0.5)
        learner["prime"]["prm_lr"] = TINY_PRM_LR
    actors = cfg.actors.model_copy(update=dict(
        num_actors=1, max_model_len=128, max_prompts_in_flight=2 * tiny_batch.rollout_batch, enforce_eager=True,
        num_gpus=0.0, dtype="float32"))
    stages = [StageConfig(max_tokens=max(4, s.max_tokens // 1024), steps=s.steps and max(s.steps // 20, 1))
              for s in cfg.data.stages]
    data = cfg.data.model_copy(update=dict(stages=stages, eval_n=4, eval_every=10, eval_max_problems=256,
                                              chat_template=False))
    return RunConfig.model_validate({**cfg.model_dump(), "tiny": True, "steps": min(cfg.steps, 40),
                                     "actors": actors.model_dump(),
                                     "learner": learner, "data": data.model_dump()})
