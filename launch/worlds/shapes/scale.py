"""`--shapes`: any preset at real-size shapes on CPU, for a few measured learner steps.

The model is ``launch.worlds.shapes.build`` (Qwen2.5-0.5B architecture, random weights, 151,936-token
vocabulary); responses run to a 512-token budget (a random policy never stops early). What is
kept from the preset: its lag policy, N_reuse and D_R/D_T. What changes, and why:

- small batches (D_R 2 groups of 4, or D_R/D_T groups when that is larger, D_T = D_R / (D_R/D_T))
  and 3 steps: 0.5B parameters on 2 CPU cores train a few thousand tokens a minute (an off-policy
  preset multiplies that by N_SGD: the on-policy one is the measurement);
- one actor (vLLM in bf16, the real checkpoint's dtype), one learner rank (fp32, ZeRO-0) with
  activation checkpointing and 1024-token micro-batches (one response each): the 24 GiB machine holds the learner's
  weights, gradients and AdamW state (8 GB) plus one engine;
- every reward is 0, so zero-advantage groups stay in the loss (dynamic sampling off) and a small
  fixed entropy bonus gives every token a gradient: the learner does its full forward, chunked
  log-prob / entropy and backward work on every response;
- no checkpoints (each would write 8 GB) and no evaluation.
"""

from __future__ import annotations

from launch.config import RunConfig, StageConfig
from launch.worlds.scaling import rescale, scale_batch

SHAPES_RESPONSE_TOKENS = 512
SHAPES_GROUP_SIZE = 4
SHAPES_ROLLOUT_BATCH = 2
SHAPES_STEPS = 3


def scale_to_shapes(cfg: RunConfig) -> RunConfig:
    batch = cfg.learner.batch                                       # D_R / D_T kept (N_SGD with it)
    batch = scale_batch(batch, max(SHAPES_ROLLOUT_BATCH, batch.updates_per_pass))
    learner = dict(dtype="fp32", lr=1e-6, warmup_steps=0, micro_batch_tokens=1024, gradient_checkpointing=True,
                   checkpoint_every=0, dynamic_sampling=False, block_ms=500, entropy={"type": "fixed", "coef": 1e-4},
                   advantage=cfg.learner.advantage.model_dump() | {"reject_zero_advantage": False})
    return rescale(cfg, "shapes", batch, stages=[StageConfig(max_tokens=SHAPES_RESPONSE_TOKENS)],
                   max_steps=SHAPES_STEPS, learner=learner,
                   actors=dict(dtype="bfloat16", max_model_len=SHAPES_RESPONSE_TOKENS + 128, cpu_kv_cache_gib=1),
                   data=dict(eval_path=None, eval_every=0, online_filter=False), group_size=SHAPES_GROUP_SIZE)
