"""`--code`: any preset scaled to the code world: arithmetic and one-line programs trained together,
code scored in the sandbox through the Ray reward pool.

Kept from the preset: what ``launch.worlds.scaling`` keeps, and its reward settings (``mixed_math_code``:
all-or-nothing code reward). What changes, and why:

- D_R 64 -> CODE_ROLLOUT_UNIT prompts (D_T by the same factor) and at most CODE_GROUP_SIZE samples per
  prompt: about half the responses are programs, and each costs the sandbox ~0.1 s on this machine, so
  a step of 16 x 8 responses keeps the reward pool at a few seconds per step;
- a 32-token response budget (gold answers are at most ~14 tokens), a 128-token context;
- the tiny world's learning-rate rule (5e-4 / sqrt(N_SGD), 10-update warm-up: the same 2-layer model);
- the chat template on (the world's tokenizer has one; its rows are chat messages in the verl layout);
- two reward workers, a held-out evaluation of both kinds.
"""

from __future__ import annotations

from launch.config import RunConfig, StageConfig
from launch.worlds.code import MAX_MODEL_LEN, RESPONSE_BUDGET
from launch.worlds.scaling import rescale, scale_batch
from launch.worlds.tiny.scale import tiny_lr

CODE_ROLLOUT_UNIT = 16
CODE_GROUP_SIZE = 8
CODE_MAX_STEPS = 40
PROMPT_TEMPLATE = "{problem}\n"   # only when a tokenizer has no chat template (this world's has one)


def scale_to_code(cfg: RunConfig) -> RunConfig:
    batch = scale_batch(cfg.learner.batch, CODE_ROLLOUT_UNIT)
    stages = [StageConfig(max_tokens=RESPONSE_BUDGET, steps=s.steps and max(s.steps // 20, 1)) for s in cfg.data.stages]
    learner = dict(lr=tiny_lr(cfg.learner.advantage.estimator) / batch.n_sgd ** 0.5, warmup_steps=10,
                   weight_decay=0.0, micro_batch_tokens=4096, checkpoint_every=5, block_ms=200)
    return rescale(cfg, "code", batch, stages=stages, max_steps=CODE_MAX_STEPS, learner=learner,
                   actors=dict(max_model_len=MAX_MODEL_LEN, dtype="float32"),
                   data=dict(eval_n=2, eval_every=10, eval_max_problems=120, chat_template=True),
                   group_size=min(cfg.group_size, CODE_GROUP_SIZE),
                   rewards=cfg.rewards.model_dump() | {"num_workers": cfg.rewards.num_workers or 2})
