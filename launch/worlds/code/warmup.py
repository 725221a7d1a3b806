"""Supervised warm-up on the code world: teach the answer formats, stop while both kinds are still
only sometimes right.

Each batch is half arithmetic, half code until code reaches the target, then one eighth code (the
programs are learnt much faster than the sums; without this, code would be nearly always right by the
time the sums are sometimes right, and its groups would teach RL nothing). Every ``eval_every`` steps
one answer per validation problem is sampled at τ=1 and checked cheaply (math: the last ``\\boxed{}``
holds the sum; code: the extracted program is the gold one, character for character); training stops
at the first check where both kinds reach ``target_accuracy``. The build then measures the result with
the real rewards (math-verify and the sandbox), which accept more than the exact-match check
(``build.measure``).
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.code import RESPONSE_BUDGET
from launch.worlds.code.task import Item
from launch.worlds.warmup_loop import teacher_forced_batch, train_until_check

_BOXED = re.compile(r"\\boxed\{(-?\d+)\}")
_BLOCK = re.compile(r"```python\n(.*?)\n```", re.S)


@dataclass
class WarmupResult:
    steps: int
    math_accuracy: float       # exact-match check, one sample per validation problem at τ=1
    code_accuracy: float
    seconds: float


def prompt_text(tok: PreTrainedTokenizerFast, item: Item) -> str:
    return tok.apply_chat_template(item.messages, tokenize=False, add_generation_prompt=True)


def encode(tok: PreTrainedTokenizerFast, items: list[Item]) -> dict[str, tuple[list[int], list[int]]]:
    """id -> (prompt ids, response ids + EOS), once per problem (not once per batch)."""
    prompts = tok([prompt_text(tok, i) for i in items], add_special_tokens=False)["input_ids"]
    responses = tok([i.solution for i in items], add_special_tokens=False)["input_ids"]
    return {i.id: (p, r + [tok.eos_token_id]) for i, p, r in zip(items, prompts, responses)}


def _batch(tok: PreTrainedTokenizerFast, items: list[Item],
           encoded: dict[str, tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    """Right-padded prompt + solution + EOS, labels on the response tokens only."""
    return teacher_forced_batch(tok, [encoded[item.id] for item in items])


def exact_match(text: str, item: Item) -> bool:
    if item.is_code:
        m = _BLOCK.search(text)
        return m is not None and m.group(1).strip() == item.row["extra_info"]["solution"]
    boxes = _BOXED.findall(text)
    return bool(boxes) and boxes[-1] == item.row["reward_model"]["ground_truth"]


@torch.no_grad()
def sample(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, items: list[Item], seed: int,
           temperature: float = 1.0) -> list[str]:
    """One response per item at temperature τ (no top-k/top-p), decoded without special tokens."""
    model.eval()
    tok.padding_side = "left"
    enc = tok([prompt_text(tok, i) for i in items], return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=RESPONSE_BUDGET, pad_token_id=tok.pad_token_id)
    tok.padding_side = "right"
    model.train()
    return tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def accuracies(model, tok, items: list[Item], seed: int) -> tuple[float, float]:
    """(math, code) exact-match accuracy of one sample per item."""
    hits = [exact_match(t, i) for t, i in zip(sample(model, tok, items, seed), items)]
    math = [h for h, i in zip(hits, items) if not i.is_code]
    code = [h for h, i in zip(hits, items) if i.is_code]
    return sum(math) / max(len(math), 1), sum(code) / max(len(code), 1)


def warm_up(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, pool: list[Item], val: list[Item], *,
            seed: int, target_accuracy: float = 0.2, max_steps: int = 1500, eval_every: int = 50,
            batch_size: int = 48, lr: float = 1e-3, log=print) -> WarmupResult:
    rng = random.Random(seed)
    math = [i for i in pool if not i.is_code]
    code = [i for i in pool if i.is_code]
    encoded = encode(tok, pool)
    start, acc = time.monotonic(), (0.0, 0.0)

    def next_batch(_: int) -> dict[str, torch.Tensor]:
        n_code = batch_size // 2 if acc[1] < target_accuracy else batch_size // 8
        return _batch(tok, rng.sample(math, batch_size - n_code) + rng.sample(code, n_code), encoded)

    def check(step: int, loss: float) -> bool:
        nonlocal acc
        acc = accuracies(model, tok, val, seed + step)
        log(f"[code] warm-up step {step:5d}  loss {loss:.3f}  val acc@τ=1 math {acc[0]:.3f} "
            f"code {acc[1]:.3f}  ({time.monotonic() - start:.0f}s)")
        return min(acc) >= target_accuracy

    step = train_until_check(model, next_batch, check, seed=seed, lr=lr, max_steps=max_steps,
                             check_every=eval_every)
    return WarmupResult(steps=step, math_accuracy=acc[0], code_accuracy=acc[1], seconds=time.monotonic() - start)
