"""The reasoning world: a second CPU world whose answers need a written trace (launch.worlds.reasoning.task).

    task.py      the problems (sums of k one-digit operands) and their gold traces
    model.py     the 4-layer Qwen2 policy
    warmup.py    SFT on the gold traces until sampled accuracy at τ=1 reaches its target
    sampling.py  what a policy does when sampled: accuracy, truncation per budget, lengths, entropy
    build.py     build / cache / manifest (`python -m launch.worlds reasoning`)
    scale.py     `--reasoning`: any preset scaled to this world

Constants the pieces share:

  STAGE_BUDGETS   the response budgets the world is measured at: the paper's 8K -> 16K -> 32K divided by
                  128. Gold traces run 13..159 tokens, so 64 cuts most long-k problems, 128 a few, 256 none.
  MAX_MODEL_LEN   longest prompt (71 tokens) + the largest budget, rounded up.
"""

from launch.worlds.reasoning.task import PROMPT_TEMPLATE

STAGE_BUDGETS: tuple[int, ...] = (64, 128, 256)
MAX_MODEL_LEN = 384

__all__ = ["MAX_MODEL_LEN", "PROMPT_TEMPLATE", "STAGE_BUDGETS"]
