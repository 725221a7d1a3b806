"""avg@n / pass@k evaluation over a held-out set (DESIGN.md §7: AIME24/25 avg@32).

avg@n: per problem, the fraction of its n sampled completions that are correct; averaged over
problems (the Skywork-OR1 / DeepSeek-R1 metric: it is the expected pass@1 with n samples per problem
to lower its variance). pass@k: the unbiased estimator of Chen et al. 2021 (Codex),
1 - C(n-c, k) / C(n, k), computed as the product 1 - prod_{i=n-c+1..n} (1 - k/i) so that n = 32, 64
or 1024 never forms a huge binomial. Correct means reason == "correct" (for code: every test passed).
Problems may have different n; pass@k needs k <= n for every problem and says so if not.
A pass@k curve takes k = 1, 2, 4, ... up to n, plus n itself (:func:`curve_ks`), as reported after
each Sky-T1 stage; with k = n it reads the fraction of problems solved at least once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from rewards.config import RewardConfig
from rewards.problems import Problem
from rewards.result import RewardResult
from rewards.scoring import score_group


@dataclass(frozen=True)
class EvalReport:
    n_problems: int
    n_samples: int                       # total completions scored
    avg_at_n: float                      # in [0, 1]
    pass_at_k: dict[int, float]
    by_source: dict[str, "EvalReport"] = field(default_factory=dict)

    def format(self) -> str:
        """Human-readable table (percentages), one line per data source."""
        ks = sorted(self.pass_at_k)
        head = f"{'source':<14}{'problems':>9}{'samples':>9}{'avg@n':>9}" + "".join(f"{'pass@' + str(k):>10}" for k in ks)
        rows = [head] + [_row(name, r, ks) for name, r in sorted(self.by_source.items())] + [_row("all", self, ks)]
        return "\n".join(rows)


def _row(name: str, r: EvalReport, ks: list[int]) -> str:
    return (f"{name:<14}{r.n_problems:>9}{r.n_samples:>9}{100 * r.avg_at_n:>8.2f}%"
            + "".join(f"{100 * r.pass_at_k[k]:>9.2f}%" for k in ks))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021), numerically stable."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def curve_ks(n: int) -> list[int]:
    """The k of a pass@k curve from n samples: 1, 2, 4, ... <= n, and n when it is not a power of 2."""
    if n < 1:
        raise ValueError(f"need n >= 1 samples, got {n}")
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else ks + [n]


def summarize(correct: Sequence[Sequence[bool]], data_sources: Sequence[str] | None = None,
              ks: Sequence[int] = (1,)) -> EvalReport:
    """Report from per-problem correctness lists (one list of n booleans per problem)."""
    if not correct:
        raise ValueError("no problems to evaluate")
    if any(len(c) == 0 for c in correct):
        raise ValueError("every problem needs at least one completion")
    sources = list(data_sources) if data_sources is not None else ["all"] * len(correct)
    if len(sources) != len(correct):
        raise ValueError("data_sources must have one entry per problem")
    min_n = min(len(c) for c in correct)
    if any(k > min_n for k in ks):
        raise ValueError(f"pass@k needs k <= n for every problem; smallest n is {min_n}, ks={list(ks)}")
    report = _summarize(correct, ks)
    groups: dict[str, list[Sequence[bool]]] = defaultdict(list)
    for src, c in zip(sources, correct):
        groups[src].append(c)
    by_source = {src: _summarize(cs, ks) for src, cs in groups.items()}
    return EvalReport(report.n_problems, report.n_samples, report.avg_at_n, report.pass_at_k, by_source)


def _summarize(correct: Sequence[Sequence[bool]], ks: Sequence[int]) -> EvalReport:
    counts = [(len(c), sum(bool(x) for x in c)) for c in correct]
    avg = sum(c / n for n, c in counts) / len(counts)
    pk = {k: sum(pass_at_k(n, c, k) for n, c in counts) / len(counts) for k in ks}
    return EvalReport(len(counts), sum(n for n, _ in counts), avg, pk)


def evaluate_results(results: Sequence[Sequence[RewardResult]], data_sources: Sequence[str] | None = None,
                     ks: Sequence[int] = (1,)) -> EvalReport:
    return summarize([[r.correct for r in rs] for rs in results], data_sources, ks)


def evaluate_completions(problems: Sequence[Problem], completions: Sequence[Sequence[str]],
                         ks: Sequence[int] = (1,), cfg: RewardConfig | None = None) -> EvalReport:
    """Score `completions[i]` (n texts) against `problems[i]` in-process, then summarize."""
    if len(problems) != len(completions):
        raise ValueError("one list of completions per problem")
    results = [score_group(texts, p.answer, p.data_source, cfg) for p, texts in zip(problems, completions)]
    return evaluate_results(results, [p.data_source for p in problems], ks)
