"""The routes world: a CPU world whose warmed-up policy has entropy to lose (issue 33, item 1).

The sum of k one-digit operands, solved along one of many equivalent routes (launch.worlds.routes.task):
the order of the steps, how each is written and optional checks are free, and some routes are easier
to finish correctly than others, so the SFT warm-up leaves a spread-out policy (>= 0.4 nats/token at
τ=1) that RL can sharpen, as a distilled reasoning model at the start of RL.

    task.py      the problems, the route sampler, the response parser
    warmup.py    SFT on sampled routes until sampled accuracy at τ=1 reaches its target
    sampling.py  what a policy does when sampled: accuracy, entropy, lengths per k, cuts per budget, routes
    entropy_sources.py  where that entropy sits (form, check, separator, ...): what RL can take away
    build.py     build / cache / manifest (`python -m launch.worlds routes`)
    scale.py     `--routes`: any preset scaled to this world (`--slips`: to the slips world, the same
                 grammar by a teacher that slips after its rarer separators and check words)

The policy is the reasoning world's 4-layer Qwen2 (launch.worlds.reasoning.model), its tokenizer the
worlds' BPE (launch.worlds.tokenizer), its warm-up the worlds' shared loop (launch.worlds.warmup_loop).

Constants the pieces share:

  STAGE_BUDGETS   the response budgets the world is measured at: the paper's 8K -> 16K -> 32K times
                  3/512 (the `--routes` scaling's multi-stage schedule; 16K, the single-stage presets'
                  budget, is 96). Sampled responses (seed 0, τ=1): p10 30, median 64, max 113
                  tokens, so 48 cuts 68% of them, 96 6%, 192 none.
  MAX_MODEL_LEN   longest prompt (~40 tokens) + the largest budget, rounded up.
"""

from launch.worlds.routes.task import PROMPT_TEMPLATE

STAGE_BUDGETS: tuple[int, ...] = (48, 96, 192)
MAX_MODEL_LEN = 256

__all__ = ["MAX_MODEL_LEN", "PROMPT_TEMPLATE", "STAGE_BUDGETS"]
