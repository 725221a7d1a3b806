"""What the policy does when sampled: accuracy (math-verify), truncation at each stage budget, lengths, entropy.

One sample per problem at temperature τ with no top-k/top-p (the RL actors' setting), up to the
largest stage budget. A response is "cut at B" when it has not produced EOS within B tokens; its
accuracy under budget B counts only responses that finished within B, since a stage with budget B
would have truncated the rest before the box. Entropy is the mean over response tokens (EOS
included) of the entropy of softmax(logits / τ), the quantity the adaptive entropy control steers
towards its target (0.2 nats in Skywork-OR1).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.reasoning.task import SumProblem
from rewards.math_reward import score_math


@dataclass
class SampleStats:
    temperature: float
    n: int
    accuracy: float                      # correct within the largest budget
    accuracy_at: dict[int, float]        # budget -> correct and finished within it
    cut_at: dict[int, float]             # budget -> fraction with no EOS within it
    mean_length: float                   # response tokens (EOS included; a cut response counts its budget)
    length_quantiles: dict[str, int]     # p10 / p50 / p90 / max
    mean_entropy: float                  # nats per response token


@torch.no_grad()
def generate(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, prompts: list[str], *, seed: int,
             temperature: float, max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
    """Sampled response token ids (cut after EOS) and the per-token entropy at τ, for each prompt."""
    model.eval()
    side, tok.padding_side = tok.padding_side, "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    tok.padding_side = side
    torch.manual_seed(seed)
    out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                         return_dict_in_generate=True, output_scores=True)
    new = out.sequences[:, enc["input_ids"].shape[1]:]                     # (B, T)
    scores = torch.stack(out.scores, dim=1)                                # (B, T, V): logits / τ
    logp = torch.log_softmax(scores.float(), dim=-1)
    entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)         # (B, T)
    ids, ents = [], []
    for row, ent in zip(new.tolist(), entropy.tolist()):
        n = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        ids.append(row[:n])
        ents.append(ent[:n])
    return ids, ents


def sample_stats(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, problems: list[SumProblem], *,
                 seed: int, temperature: float = 1.0, budgets: tuple[int, ...] = (64, 128, 256),
                 batch_size: int = 128) -> SampleStats:
    """Sample once per problem up to max(budgets) tokens and measure what a stage of each budget would see."""
    top = max(budgets)
    ids, ents = [], []
    for i in range(0, len(problems), batch_size):
        chunk = problems[i:i + batch_size]
        a, b = generate(model, tok, [p.prompt for p in chunk], seed=seed + i, temperature=temperature,
                        max_new_tokens=top)
        ids += a
        ents += b
    finished = [bool(r) and r[-1] == tok.eos_token_id for r in ids]
    correct = [score_math(tok.decode(r, skip_special_tokens=True), p.answer).reward > 0
               for r, p in zip(ids, problems)]
    lengths = [len(r) for r in ids]
    n = len(problems)
    within = {b: [f and ln <= b for f, ln in zip(finished, lengths)] for b in budgets}
    qs = statistics.quantiles(lengths, n=10, method="inclusive")
    flat = [e for row in ents for e in row]
    return SampleStats(
        temperature=temperature, n=n, accuracy=sum(c and f for c, f in zip(correct, finished)) / n,
        accuracy_at={b: sum(c and w for c, w in zip(correct, within[b])) / n for b in budgets},
        cut_at={b: sum(not w for w in within[b]) / n for b in budgets},
        mean_length=sum(lengths) / n,
        length_quantiles={"p10": round(qs[0]), "p50": round(qs[4]), "p90": round(qs[8]), "max": max(lengths)},
        mean_entropy=sum(flat) / max(len(flat), 1),
    )
