"""Supervised warm-up on gold traces: teach the format and some arithmetic, then stop part-way.

RL needs a base policy that is right some of the time (DESIGN.md §9: roughly 10-50% under
sampling at τ=1). Training stops at the first check whose *sampled* validation accuracy at τ=1
(verified with math-verify, launch.worlds.reasoning.sampling) reaches `target_accuracy`, or after
`max_steps`, which keeps the build deterministic for a seed.

Sampling 256 responses of up to 256 tokens costs as much as a dozen training steps, so it runs only
when a one-forward-pass estimate says the target is near: the mean over validation problems of
P(a τ=1 sample reproduces the gold trace) = exp(Σ_t log p(gold_t | gold_<t)). That is a lower bound
on sampled accuracy (another trace reaching the right box is the only difference) with no sampling
noise.

Batches are sorted by length and cut into micro-batches, each with its own padding; the loss is the
token-level mean over the whole batch (summed per micro-batch, divided by the batch's response tokens).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.reasoning.sampling import SampleStats, sample_stats
from launch.worlds.reasoning.task import SumProblem


@dataclass
class WarmupResult:
    steps: int
    accuracy: float                  # validation accuracy, one sample per problem at τ=1, budget 256
    seconds: float
    gold_trace_prob: float           # mean P(τ=1 sample == gold trace) on validation at the end
    checks: list[dict] = field(default_factory=list)   # every sampled check: step and its figures


class Encoder:
    """Prompt and response token ids (response + EOS) per problem, encoded once."""

    def __init__(self, tok: PreTrainedTokenizerFast):
        self.tok = tok
        self._cache: dict[str, tuple[list[int], list[int]]] = {}

    def __call__(self, p: SumProblem) -> tuple[list[int], list[int]]:
        if p.id not in self._cache:
            self._cache[p.id] = (self.tok(p.prompt)["input_ids"],
                                 self.tok(p.solution)["input_ids"] + [self.tok.eos_token_id])
        return self._cache[p.id]

    def batch(self, problems: list[SumProblem]) -> dict[str, torch.Tensor]:
        """Right-padded prompt+response with labels only on the response tokens."""
        ids, labels = [], []
        for p in problems:
            prompt, response = self(p)
            ids.append(prompt + response)
            labels.append([-100] * len(prompt) + response)
        width, pad = max(map(len, ids)), self.tok.pad_token_id
        return {
            "input_ids": torch.tensor([x + [pad] * (width - len(x)) for x in ids]),             # (B, L)
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
            "labels": torch.tensor([y + [-100] * (width - len(y)) for y in labels]),
        }


def _token_logprobs(model: Qwen2ForCausalLM, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p of each label token, mask of label tokens), both (B, L-1)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    logp = -F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")     # (B, L-1)
    return logp * mask, mask


@torch.no_grad()
def gold_trace_prob(model: Qwen2ForCausalLM, enc: Encoder, problems: list[SumProblem], chunk: int = 64) -> float:
    """Mean over problems of P(a τ=1 sample is exactly the gold trace)."""
    model.eval()
    ordered = sorted(problems, key=lambda p: sum(map(len, enc(p))))
    total = 0.0
    for i in range(0, len(ordered), chunk):
        logp, _ = _token_logprobs(model, enc.batch(ordered[i:i + chunk]))
        total += logp.sum(-1).exp().sum().item()
    model.train()
    return total / len(problems)


def warm_up(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, train: list[SumProblem],
            val: list[SumProblem], *, seed: int, target_accuracy: float = 0.25, max_steps: int = 1500,
            batch_size: int = 32, micro_batches: int = 2, lr: float = 3e-3, lr_warmup: int = 20,
            check_every: int = 25, sample_when: float = 0.6, log=print) -> WarmupResult:
    """Train until sampled validation accuracy at τ=1 reaches target_accuracy (or max_steps).

    A sampled check runs when the gold-trace probability reaches `sample_when` × target."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    enc = Encoder(tok)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    model.train()
    start, step, checks = time.monotonic(), 0, []
    stats: SampleStats | None = None
    while step < max_steps:
        step += 1
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / lr_warmup)
        batch = sorted(rng.sample(train, batch_size), key=lambda p: sum(map(len, enc(p))))
        n_tokens = sum(len(enc(p)[1]) for p in batch)
        size = -(-batch_size // micro_batches)
        for i in range(0, batch_size, size):
            logp, _ = _token_logprobs(model, enc.batch(batch[i:i + size]))
            (-logp.sum() / n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % check_every and step != max_steps:
            continue
        prob = gold_trace_prob(model, enc, val)
        log(f"[reasoning] warm-up step {step:5d}  P(gold trace) {prob:.3f}  ({time.monotonic() - start:.0f}s)")
        if prob < sample_when * target_accuracy and step != max_steps:
            continue
        stats = sample_stats(model, tok, val, seed=seed + step, temperature=1.0)
        checks.append({"step": step, "gold_trace_prob": round(prob, 4), **asdict(stats)})
        log(f"[reasoning] warm-up step {step:5d}  sampled acc@τ=1 {stats.accuracy:.3f}  "
            f"cut@64 {stats.cut_at[64]:.2f}  mean len {stats.mean_length:.0f}  "
            f"entropy {stats.mean_entropy:.3f}  ({time.monotonic() - start:.0f}s)")
        if stats.accuracy >= target_accuracy:
            break
    model.eval()
    return WarmupResult(steps=step, accuracy=stats.accuracy if stats else 0.0,
                        seconds=round(time.monotonic() - start, 1), gold_trace_prob=round(prob, 4), checks=checks)
