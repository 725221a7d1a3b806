"""The reasoning world: a second CPU world whose answers need a written trace (launch.reasoning.task).

Its recommended run settings, as plain constants for presets to build from (the figures they rest
on are in the built world's manifest, `world.json`):

  STAGE_BUDGETS      response-token budget per stage, the paper's 8K -> 16K -> 32K scaled down: the
                     warmed-up policy's responses run ~14..160 tokens, so the 64-token stage cuts many
                     of them (the long-k problems), 128 fewer and 256 almost none.
  MAX_MODEL_LEN      longest prompt (~70 tokens) + the largest budget, rounded up.
  GROUP_SIZE         samples per prompt.
  TEMPERATURE        sampling τ of the actors (and the learner's logit divisor).
  OVERLONG_BUFFER    tokens before a stage's budget where overlong shaping starts its penalty
                     (DAPO's soft overlong punishment, scaled like the budgets).
  TARGET_ENTROPY     the adaptive entropy control's target (Skywork-OR1: 0.2 nats).
"""

from launch.reasoning.task import PROMPT_TEMPLATE

STAGE_BUDGETS: tuple[int, ...] = (64, 128, 256)
MAX_MODEL_LEN = 384
GROUP_SIZE = 16
TEMPERATURE = 1.0
OVERLONG_BUFFER = 16
TARGET_ENTROPY = 0.2

__all__ = ["GROUP_SIZE", "MAX_MODEL_LEN", "OVERLONG_BUFFER", "PROMPT_TEMPLATE", "STAGE_BUDGETS",
           "TARGET_ENTROPY", "TEMPERATURE"]
