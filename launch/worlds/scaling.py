"""What every world's scaling of a preset shares (each world's ``scale.py`` says what it sets and why).

Kept from the preset: the lag policy (``learner.lag``, carried over as the preset states it), N_reuse and
D_R/D_T (hence N_SGD), the clip range, the entropy rule, the truncation mask and the sampling temperature:
what an ablation is about. Always changed for a CPU world: one learner rank (ZeRO-0), one CPU actor (eager
vLLM, no GPU, two rollout batches of prompts in flight), no chat template (the worlds' tokenizers have
none), a few steps.
"""

from __future__ import annotations

from typing import Any

from launch.config import RunConfig, StageConfig
from learner.config import BatchConfig


def scale_batch(batch: BatchConfig, rollout_unit: int) -> BatchConfig:
    """D_R down to ``rollout_unit`` and D_T by the same factor: D_R/D_T, N_reuse and N_SGD are kept."""
    factor = max(batch.rollout_batch // rollout_unit, 1)
    if batch.mini_batch % factor:
        raise ValueError(f"cannot scale D_T={batch.mini_batch} by 1/{factor} keeping the ratio")
    return batch.model_copy(update=dict(rollout_batch=batch.rollout_batch // factor,
                                        mini_batch=batch.mini_batch // factor))


def scale_stages(stages: list[StageConfig], budget_divisor: int, min_budget: int,
                 step_divisor: int) -> list[StageConfig]:
    """Each stage's response budget divided by ``budget_divisor`` (at least ``min_budget``) and its length
    in steps by ``step_divisor`` (at least 1; the open-ended last stage stays open)."""
    return [StageConfig(max_tokens=max(min_budget, s.max_tokens // budget_divisor),
                        steps=s.steps and max(s.steps // step_divisor, 1)) for s in stages]


def small_model_learner(cfg: RunConfig, lr: float, scale_tokens) -> dict[str, Any]:
    """The learner fields of the written-out worlds (reasoning, routes): their learning rate, a short
    warm-up, no weight decay, one micro-batch, no checkpoints, and the preset's overlong cache L_cache
    scaled like the budgets (``scale_tokens(paper_tokens) -> world tokens``, at least 1)."""
    learner: dict[str, Any] = dict(lr=lr, warmup_steps=5, weight_decay=0.0, micro_batch_tokens=8192,
                                   checkpoint_every=0, block_ms=200)
    cache = cfg.learner.advantage.overlong_cache
    if cache is not None:
        learner["advantage"] = cfg.learner.advantage.model_dump() | {"overlong_cache": max(scale_tokens(cache), 1)}
    return learner


def rescale(cfg: RunConfig, world: str, batch: BatchConfig, *, stages: list[StageConfig], max_steps: int,
            learner: dict[str, Any], actors: dict[str, Any], data: dict[str, Any], **run: Any) -> RunConfig:
    """``cfg`` moved to ``world`` with mini-batches ``batch`` (:func:`scale_batch`), response budgets
    ``stages``, at most ``max_steps`` steps, the CPU defaults of the module docstring, and the
    world's own ``learner`` / ``actors`` / ``data`` / run-wide fields on top; validated as a whole."""
    learner_cfg = cfg.learner.model_dump() | {"batch": batch.model_dump(), "num_ranks": 1, "zero_stage": 0} | learner
    actor_cfg = cfg.actors.model_dump() | {"num_actors": 1, "enforce_eager": True, "num_gpus": 0.0,
                                           "max_prompts_in_flight": 2 * batch.rollout_batch} | actors
    data_cfg = cfg.data.model_dump() | {"stages": [s.model_dump() for s in stages], "chat_template": False} | data
    return RunConfig.model_validate({**cfg.model_dump(), "world": world, "steps": min(cfg.steps, max_steps), **run,
                                     "learner": learner_cfg, "actors": actor_cfg, "data": data_cfg})
