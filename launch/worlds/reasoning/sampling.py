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

from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.reasoning.task import SumProblem
from launch.worlds.sampling import generate_batched
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


def sample_stats(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, problems: list[SumProblem], *,
                 seed: int, temperature: float = 1.0, budgets: tuple[int, ...] = (64, 128, 256),
                 batch_size: int = 128) -> SampleStats:
    """Sample once per problem up to max(budgets) tokens and measure what a stage of each budget would see."""
    top = max(budgets)
    ids, ents = generate_batched(model, tok, [p.prompt for p in problems], seed=seed, temperature=temperature,
                                 max_new_tokens=top, batch_size=batch_size)
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
