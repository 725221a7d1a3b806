"""`--code`: any preset scaled to the code world (launch.codeworld): arithmetic and one-line programs
trained together, code scored in the sandbox through the Ray reward pool.

What is kept from the preset: its mode, N_reuse, D_R/D_T (hence N_SGD), τ, clip range, entropy rule
and reward settings (``mixed_math_code``: all-or-nothing code reward). What changes, and why:

- D_R 64 -> CODE_ROLLOUT_UNIT prompts (D_T by the same factor) and CODE_GROUP_SIZE samples per prompt:
  about half the responses are programs, and each costs the sandbox ~0.1 s on this machine, so a step
  of 16 x 8 responses keeps the reward pool at a few seconds per step;
- a 32-token response budget (gold answers are at most ~14 tokens), a 128-token context;
- the tiny world's learning rate rule (5e-4 / sqrt(N_SGD), 10-update warm-up: the same 2-layer model);
- the chat template on (the world's tokenizer has one; its rows are chat messages in the verl layout);
- one CPU actor, one learner rank, two reward workers, a held-out evaluation of both kinds.
"""

from __future__ import annotations

from launch.codeworld import MAX_MODEL_LEN, RESPONSE_BUDGET
from launch.config import RunConfig, StageConfig
from launch.presets import TINY_LR, scale_batch

CODE_ROLLOUT_UNIT = 16
CODE_GROUP_SIZE = 8
CODE_MAX_STEPS = 40


def scale_to_code(cfg: RunConfig) -> RunConfig:
    small = scale_batch(cfg.learner.batch, CODE_ROLLOUT_UNIT)
    learner = cfg.learner.model_dump()
    learner.update(batch=small.model_dump(), lr=TINY_LR[cfg.learner.advantage.estimator] / small.n_sgd ** 0.5,
                   warmup_steps=10, weight_decay=0.0, micro_batch_tokens=4096, checkpoint_every=5, num_ranks=1,
                   zero_stage=0, block_ms=200)
    actors = cfg.actors.model_copy(update=dict(
        num_actors=1, max_model_len=MAX_MODEL_LEN, max_prompts_in_flight=2 * small.rollout_batch,
        enforce_eager=True, num_gpus=0.0, dtype="float32"))
    stages = [StageConfig(max_tokens=RESPONSE_BUDGET, steps=s.steps and max(s.steps // 20, 1)) for s in cfg.data.stages]
    data = cfg.data.model_copy(update=dict(stages=stages, eval_n=2, eval_every=10, eval_max_problems=120,
                                           chat_template=True))
    rewards = cfg.rewards.model_copy(update=dict(num_workers=cfg.rewards.num_workers or 2))
    return RunConfig.model_validate({**cfg.model_dump(), "code": True, "steps": min(cfg.steps, CODE_MAX_STEPS),
                                     "group_size": min(cfg.group_size, CODE_GROUP_SIZE),
                                     "actors": actors.model_dump(), "learner": learner, "data": data.model_dump(),
                                     "rewards": rewards.model_dump()})
