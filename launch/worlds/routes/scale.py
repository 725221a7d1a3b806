"""`--routes`: any preset scaled to the routes world (launch.worlds.routes), where the entropy findings bite.

Budgets are the paper's times 3/512, so 8K -> 16K -> 32K becomes 48 -> 96 -> 192 tokens and the
single-stage presets' 16K becomes 96: the warmed-up policy's responses (p10 30, median 64, max 113
tokens) grow with k, so a 48-token stage cuts 68% of them, 96 6%, 192 none (seed 0, τ=1; the
world's manifest). The warmed-up entropy (0.464 nats/token at τ=1) is well above the adaptive
control's 0.2 target, but two thirds of it sit in reward-idle check words and separators that RL leaves
alone, so runs of this world end near 0.43 and that control never acts (README, "Routes world"). Kept from the preset: what
``launch.worlds.scaling`` keeps, and overlong shaping (L_cache scaled like the budgets). What changes:

- D_R 64 -> ROUTES_ROLLOUT_UNIT prompts (D_T by the same factor) and ROUTES_GROUP_SIZE samples per
  prompt: one rollout batch is then ~8K response tokens, which 2 CPU cores generate and train in
  seconds;
- one learning rate, ROUTES_LR, for every preset (the paper keeps lr fixed across its ablations, so
  an arm never differs from another by its lr), with a 5-update warm-up;
- stage lengths divided by STAGE_STEP_DIVISOR so a run of a few tens of steps sees every stage;
- at most ROUTES_MAX_STEPS steps (the science report's runs are longer than the other worlds');
- one CPU actor (fp32, eager), one learner rank, a small held-out evaluation.
"""

from __future__ import annotations

from launch.config import RunConfig, StageConfig
from launch.worlds.routes import MAX_MODEL_LEN
from launch.worlds.scaling import rescale, scale_batch, small_model_learner

BUDGET_SCALE = (3, 512)         # tokens * 3 // 512: 8192 -> 48, 16384 -> 96, 32768 -> 192
ROUTES_ROLLOUT_UNIT = 16        # D_R 64 -> 16 (D_T by the same factor)
ROUTES_GROUP_SIZE = 8
ROUTES_LR = 2e-4
ROUTES_MAX_STEPS = 100
STAGE_STEP_DIVISOR = 10         # 100 -> 10: a 30-step run sees 48 (10 steps), 96 (10), 192 (10)
MIN_BUDGET = 8


def scaled_tokens(tokens: int) -> int:
    """A token count of the paper's scale in this world's (budgets, L_cache)."""
    return tokens * BUDGET_SCALE[0] // BUDGET_SCALE[1]


def scale_to_routes(cfg: RunConfig, world: str = "routes") -> RunConfig:
    batch = scale_batch(cfg.learner.batch, ROUTES_ROLLOUT_UNIT)
    learner = small_model_learner(cfg, ROUTES_LR, scaled_tokens)
    stages = [StageConfig(max_tokens=max(MIN_BUDGET, scaled_tokens(s.max_tokens)),
                          steps=s.steps and max(s.steps // STAGE_STEP_DIVISOR, 1)) for s in cfg.data.stages]
    return rescale(cfg, world, batch, stages=stages, max_steps=ROUTES_MAX_STEPS, learner=learner,
                   actors=dict(max_model_len=MAX_MODEL_LEN, dtype="float32"),
                   data=dict(eval_n=2, eval_every=0, eval_max_problems=64),
                   group_size=min(cfg.group_size, ROUTES_GROUP_SIZE))


def scale_to_slips(cfg: RunConfig) -> RunConfig:
    """`--slips`: the routes scaling, in the slips world (the same grammar and budgets; its responses,
    k <= 7, are at most ~80 tokens, so the 48-token stage cuts about half of them and 96 none)."""
    return scale_to_routes(cfg, "slips")
