"""The CPU worlds' warm-up loop: AdamW on the teacher-forced loss until a sampled check says the policy is
good enough (or a step budget runs out).

Each world decides what a batch is (``next_batch``) and what "good enough" means (``check``); the loop
is the part they share: AdamW (no weight decay) seeded once, an optional per-step learning-rate factor,
gradients clipped at norm 1, a check every ``check_every`` steps and at the last step. Stopping at the
first check that passes keeps a build deterministic for a seed: RL needs a base policy that is right
only some of the time (DESIGN.md §9).

Not the recipes' SFT stage (``launch.recipes.sft``: a JSONL dataset for a fixed number of epochs through
DeepSpeed, one process per rank, written out as a model directory). This loop is in-process, on the
world's own batches, and stops on a check rather than an epoch count; a world's build runs it on 2 CPU
cores, and its result must be byte-identical for a seed (the world's manifest hashes the weights).
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import PreTrainedTokenizerBase, PreTrainedModel


def teacher_forced_batch(tok: PreTrainedTokenizerBase,
                         pairs: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    """Right-padded prompt + response token ids, labels only on the response (whose ids end with EOS)."""
    ids = [p + r for p, r in pairs]
    labels = [[-100] * len(p) + r for p, r in pairs]
    width, pad = max(map(len, ids)), tok.pad_token_id
    return {"input_ids": torch.tensor([x + [pad] * (width - len(x)) for x in ids]),                 # (B, L)
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
            "labels": torch.tensor([y + [-100] * (width - len(y)) for y in labels])}


def train_until_check(model: PreTrainedModel, next_batch: Callable[[int], dict[str, torch.Tensor]],
              check: Callable[[int, float], bool], *, seed: int, lr: float, max_steps: int, check_every: int,
              betas: tuple[float, float] = (0.9, 0.999), lr_factor: Callable[[int], float] | None = None,
              first_check: int = 0) -> int:
    """Train until ``check(step, loss)`` returns True (or ``max_steps``); returns the steps taken.

    ``next_batch(step)`` gives step ``step``'s batch (1-based; labels -100 off the response); the loss
    is the model's own mean over the label tokens. ``lr_factor(step)`` scales ``lr`` at that step
    (None: constant). Checks run at ``first_check + n * check_every`` and at ``max_steps``."""
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=0.0)
    model.train()
    step = 0
    while step < max_steps:
        step += 1
        if lr_factor is not None:
            for group in opt.param_groups:
                group["lr"] = lr * lr_factor(step)
        loss = model(**next_batch(step)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        due = step >= first_check and (step - first_check) % check_every == 0
        if (due or step == max_steps) and check(step, loss.item()):
            break
        model.train()           # a check may have sampled in eval mode
    model.eval()
    return step
