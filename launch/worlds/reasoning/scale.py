"""`--reasoning`: any preset scaled to the reasoning world, where every knob bites.

Budgets are the paper's divided by 128, so 8K -> 16K -> 32K becomes 64 -> 128 -> 256 tokens and the
baseline's 16K becomes 128: the warmed-up policy's responses run ~15-170 tokens, so a 64-token stage
cuts the long-k problems, 128 a few, 256 none (the figures are in the world's manifest). What is
kept from the preset: its lag policy, N_reuse, D_R/D_T (hence N_SGD), τ, clip range, entropy rule,
truncation mask and overlong shaping (L_cache divided by 128 like the budgets). What changes, and why:

- D_R 64 -> REASONING_ROLLOUT_UNIT prompts (D_T by the same factor) and REASONING_GROUP_SIZE samples
  per prompt: one rollout batch is then ~8K response tokens, which 2 CPU cores generate and train in
  seconds;
- one learning rate, REASONING_LR, for every preset (the paper keeps lr fixed across its ablations,
  so an arm never differs from another by its lr), with a 5-update warm-up;
- stage lengths divided by 25 (100 steps -> 4) so a 10-step CPU run sees every stage;
- one CPU actor (fp32, eager), one learner rank, a small held-out evaluation.
"""

from __future__ import annotations

from launch.config import RunConfig
from launch.worlds.reasoning import MAX_MODEL_LEN
from launch.worlds.scaling import rescale, scale_batch, scale_stages, small_model_learner

BUDGET_DIVISOR = 128            # 8192 -> 64, 16384 -> 128, 32768 -> 256
REASONING_ROLLOUT_UNIT = 16     # D_R 64 -> 16 (D_T by the same factor)
REASONING_GROUP_SIZE = 8
REASONING_LR = 2e-4
REASONING_MAX_STEPS = 40
STAGE_STEP_DIVISOR = 25      # 100 -> 4: a 10-step run sees 64 (4 steps), 128 (4), 256 (2)


def scale_to_reasoning(cfg: RunConfig) -> RunConfig:
    batch = scale_batch(cfg.learner.batch, REASONING_ROLLOUT_UNIT)
    learner = small_model_learner(cfg, REASONING_LR, lambda tokens: tokens // BUDGET_DIVISOR)
    return rescale(cfg, "reasoning", batch, stages=scale_stages(cfg.data.stages, BUDGET_DIVISOR, 8, STAGE_STEP_DIVISOR),
                   max_steps=REASONING_MAX_STEPS, learner=learner,
                   actors=dict(max_model_len=MAX_MODEL_LEN, dtype="float32"),
                   data=dict(eval_n=2, eval_every=0, eval_max_problems=64),
                   group_size=min(cfg.group_size, REASONING_GROUP_SIZE))
