"""Supervised warm-up: teach the tiny model the answer format and some arithmetic, then stop.

RL needs a base policy that is right some of the time (DESIGN.md §9: roughly 10-50% under
sampling at τ=1): too weak and every group has zero advantage, too strong and there is nothing
left to learn. Training stops at the first evaluation whose sampled accuracy reaches
`target_accuracy` (or after `max_steps`), which keeps the build deterministic for a seed.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch
from math_verify import parse, verify
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.warmup_loop import teacher_forced_batch, train_until_check
from launch.worlds.tiny.task import Problem


@dataclass
class WarmupResult:
    steps: int
    accuracy: float       # validation accuracy, one sample per problem at τ=1
    seconds: float


def _batch(tok: PreTrainedTokenizerFast, problems: list[Problem]) -> dict[str, torch.Tensor]:
    """Right-padded prompt+solution+EOS with labels only on the response tokens."""
    return teacher_forced_batch(tok, [(tok(p.prompt)["input_ids"], tok(p.solution)["input_ids"] + [tok.eos_token_id])
                                      for p in problems])


def answer_correct(text: str, gold: str) -> bool:
    """Strict enough for the warm-up: only the text from the last `\\boxed{` on is parsed, so a
    stray digit elsewhere in a malformed answer never counts (the RL reward is rewards.math)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return False
    try:
        return bool(verify(parse(f"\\boxed{{{gold}}}"), parse(text[start:])))
    except Exception:
        return False


@torch.no_grad()
def sampled_accuracy(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, problems: list[Problem],
                     seed: int, temperature: float = 1.0, max_new_tokens: int = 12) -> float:
    """Fraction of problems whose one sample at temperature τ (no top-k/top-p) is correct."""
    model.eval()
    tok.padding_side = "left"
    enc = tok([p.prompt for p in problems], return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    tok.padding_side = "right"
    model.train()
    return sum(answer_correct(t, p.answer) for t, p in zip(texts, problems)) / len(problems)


def warm_up(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, train: list[Problem],
            val: list[Problem], *, seed: int, target_accuracy: float = 0.2, max_steps: int = 1500,
            eval_every: int = 50, batch_size: int = 64, lr: float = 1e-3, log=print) -> WarmupResult:
    """Train on the solutions until sampled validation accuracy reaches ``target_accuracy``
    (launch.worlds.warmup_loop)."""
    rng = random.Random(seed)
    start, acc = time.monotonic(), 0.0

    def check(step: int, loss: float) -> bool:
        nonlocal acc
        acc = sampled_accuracy(model, tok, val, seed=seed + step)
        log(f"[tiny] warm-up step {step:5d}  loss {loss:.3f}  val acc@τ=1 {acc:.3f}  ({time.monotonic() - start:.0f}s)")
        return acc >= target_accuracy

    step = train_until_check(model, lambda _: _batch(tok, rng.sample(train, batch_size)), check, seed=seed, lr=lr,
                             max_steps=max_steps, check_every=eval_every)
    return WarmupResult(steps=step, accuracy=acc, seconds=time.monotonic() - start)
