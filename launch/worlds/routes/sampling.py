"""What the routes policy does when sampled: accuracy, entropy, lengths per difficulty, cuts per budget, routes.

One sample per problem at temperature τ with no top-k/top-p (the RL actors' setting), drawn with
transformers' `generate` (launch.worlds.sampling) up to the largest stage budget. A response is
"cut at B" when it has not produced EOS within B tokens; its accuracy under budget B counts only responses that finished
within B (a stage with budget B would have truncated the rest before the box). Entropy is the mean
over response tokens (EOS included) of the entropy of softmax(logits / τ): the quantity the
adaptive entropy control steers towards its target (0.2 nats in Skywork-OR1). Correctness is
math-verify's (rewards.math), as in a run; the route a response took is read by
`task.parse_response`, to show which routes finish correctly, and how often a line comes out right
after each form, separator and check word (in the slips world the teacher's slips make these differ).
"""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass

from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.reasoning import sampling as reasoning_sampling
from launch.worlds.routes.task import SumProblem, parse_response
from launch.worlds.sampling import generate
from rewards.math_reward import score_math


@dataclass
class SampleStats(reasoning_sampling.SampleStats):
    """The reasoning world's figures (accuracy, per-budget accuracy and cuts, lengths, entropy), and:"""

    length_by_k: dict[int, dict[str, int]]   # k -> p10 / p50 / p90
    accuracy_by_k: dict[int, float]
    routes: dict[str, dict[str, float]]      # route taken -> share of responses, accuracy on it
    forms: dict[str, dict[str, float]]       # how an addition was written -> share of lines, lines right
    separators: dict[str, dict[str, float]]  # the separator before an addition -> share of lines, lines right
    after_check: dict[str, dict[str, float]]  # the previous line's check word ("" none) -> share, lines right


def _quantiles(values: list[int]) -> dict[str, int]:
    if len(values) == 1:
        return {"p10": values[0], "p50": values[0], "p90": values[0]}
    qs = statistics.quantiles(values, n=10, method="inclusive")
    return {"p10": round(qs[0]), "p50": round(qs[4]), "p90": round(qs[8])}


def sample_stats(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, problems: list[SumProblem], *,
                 seed: int, temperature: float, budgets: tuple[int, ...], batch_size: int = 128) -> SampleStats:
    """Sample once per problem up to max(budgets) tokens and measure what a stage of each budget would see."""
    ids, ents = [], []
    # similar k together: a batch generates until its longest response ends
    order = sorted(range(len(problems)), key=lambda i: problems[i].k)
    for start in range(0, len(order), batch_size):
        chunk = [problems[i] for i in order[start:start + batch_size]]
        a, b = generate(model, tok, [p.prompt for p in chunk], seed=seed + start, temperature=temperature,
                        max_new_tokens=max(budgets))
        ids += a
        ents += b
    problems = [problems[i] for i in order]
    texts = [tok.decode(r, skip_special_tokens=True) for r in ids]
    finished = [bool(r) and r[-1] == tok.eos_token_id for r in ids]
    correct = [f and score_math(t, p.answer).reward > 0 for t, f, p in zip(texts, finished, problems)]
    lengths = [len(r) for r in ids]
    n = len(problems)
    within = {b: [f and ln <= b for f, ln in zip(finished, lengths)] for b in budgets}
    by_k: dict[int, list[int]] = collections.defaultdict(list)
    for p, i in zip(problems, range(n)):
        by_k[p.k].append(i)
    routes: dict[str, list[bool]] = collections.defaultdict(list)
    lines, by_separator, by_check = (collections.defaultdict(list) for _ in range(3))
    for text, p, c in zip(texts, problems, correct):
        parsed = parse_response(text, p)
        routes[parsed.route if parsed else "unparsed"].append(c)
        if parsed:
            for form, sep, check, ok in zip(parsed.forms, parsed.separators, parsed.checks, parsed.line_ok):
                lines[form].append(ok)
                by_separator[sep].append(ok)
                by_check[check].append(ok)
    n_lines = max(sum(map(len, lines.values())), 1)

    def line_figures(groups: dict[str, list[bool]]) -> dict[str, dict[str, float]]:
        return {name: {"share": round(len(v) / n_lines, 3), "accuracy": round(sum(v) / len(v), 3)}
                for name, v in sorted(groups.items())}

    flat = [e for row in ents for e in row]
    return SampleStats(
        temperature=temperature, n=n, accuracy=sum(correct) / n,
        accuracy_at={b: sum(c and w for c, w in zip(correct, within[b])) / n for b in budgets},
        cut_at={b: sum(not w for w in within[b]) / n for b in budgets},
        mean_length=sum(lengths) / n,
        length_quantiles={**_quantiles(lengths), "max": max(lengths)},
        length_by_k={k: _quantiles([lengths[i] for i in idx]) for k, idx in sorted(by_k.items())},
        accuracy_by_k={k: round(sum(correct[i] for i in idx) / len(idx), 3) for k, idx in sorted(by_k.items())},
        mean_entropy=sum(flat) / max(len(flat), 1),
        routes={name: {"share": round(len(v) / n, 3), "accuracy": round(sum(v) / len(v), 3)}
                for name, v in sorted(routes.items())},
        forms=line_figures(lines), separators=line_figures(by_separator), after_check=line_figures(by_check),
    )
