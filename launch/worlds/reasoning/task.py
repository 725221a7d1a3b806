"""The reasoning world's task: the sum of k numbers, written out step by step with running totals.

A problem names its k one-digit operands with letters, one per line (`Add:\na=7\nb=5\nc=3\nd=8`); its
gold response (the SFT target) is one line per addition, labelled with the letter added, then the box:

    b:7+5=12
    c:12+3=15
    d:15+8=23
    \\boxed{23}

k (the number of operands, K_MIN..K_MAX) is drawn per problem, so the written trace, and with it
the number of places a sampled response can go wrong, grows linearly with difficulty: 9-10 tokens a
line, ~14 tokens for k=2 up to ~160 for k=K_MAX. That is what makes response-length budgets
(64 cuts k >= 7), truncation masks and overlong shaping bite, which the tiny world's 7-token answers
never do. What makes the trace learnable in a few CPU minutes (measured with a 4-layer, 1M-parameter
model): the letters, since "the value after `c=`" is the one-hop pattern (an induction head) small
transformers pick up early, where "the operand after the one just added" from an unlabelled list is a
two-hop lookup; and one-digit operands, since with two-digit ones the same model was still at 72%
teacher-forced token accuracy after 400 steps (it learned neither the fetch nor the carries), with
one-digit ones it reached 97% at 350 steps and 99.6% at 500.

Splits are a deterministic function of the seed; no validation problem appears in the training
split. Training problems may repeat (k=2 has only 81 problems): k stays uniform over K_MIN..K_MAX,
so the warm-up sees as many short traces (which stop after one line) as long ones.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from rewards import problems as problems_io

PROMPT_TEMPLATE = "Q: {problem}\nA: "
DATA_SOURCE = "reasoning_sum"
K_MIN, K_MAX = 2, 16            # operands per problem (one letter each)
LETTERS = "abcdefghijklmnop"
MIN_OPERAND, MAX_OPERAND = 1, 9


@dataclass(frozen=True)
class SumProblem:
    """One problem, in the record shape rewards.problems.load_problems reads (plus k)."""

    id: str
    data_source: str
    problem: str
    answer: str
    k: int

    @property
    def operands(self) -> list[int]:
        """One operand per line after "Add:", after its letter (``a=7`` here, ``a7`` in the routes world)."""
        return [int(line[1:].lstrip("=")) for line in self.problem.splitlines()[1:]]

    @property
    def prompt(self) -> str:
        return PROMPT_TEMPLATE.format(problem=self.problem)

    @property
    def solution(self) -> str:
        return gold_trace(self.operands)


def problem_text(operands: list[int]) -> str:
    """One `letter=value` per line: after a newline a letter is a token of its own, the same token the
    trace's `c:` starts with (after a space or comma, Qwen2's pre-tokeniser would glue it to that)."""
    return "Add:\n" + "\n".join(f"{name}={x}" for name, x in zip(LETTERS, operands))


def gold_trace(operands: list[int]) -> str:
    """The step-by-step response: `letter:total+x=new_total` per operand after the first, then the box."""
    lines, total = [], operands[0]
    for name, x in zip(LETTERS[1:], operands[1:]):
        lines.append(f"{name}:{total}+{x}={total + x}")
        total += x
    return "\n".join(lines) + f"\n\\boxed{{{total}}}"


def make_problem(rng: random.Random, index: int, k: int | None = None) -> SumProblem:
    """k operands drawn from rng (k itself too, uniformly, when not given)."""
    k = k if k is not None else rng.randint(K_MIN, K_MAX)
    operands = [rng.randint(MIN_OPERAND, MAX_OPERAND) for _ in range(k)]
    return SumProblem(id=f"sum-{index:06d}", data_source=DATA_SOURCE, problem=problem_text(operands),
                      answer=str(sum(operands)), k=k)


def make_splits(seed: int, n_train: int = 20000, n_val: int = 256, *,
                make: Callable[..., SumProblem] | None = None,
                ks: range = range(K_MIN, K_MAX + 1)) -> tuple[list[SumProblem], list[SumProblem]]:
    """(train, validation), disjoint by problem text. Validation cycles through ``ks`` (so any prefix of
    it, and the whole, weighs every difficulty alike), distinct problems only; training problems are
    drawn by ``make(rng, index)`` (k uniform over ``ks``), repeats allowed, validation problems excluded.
    ``make(rng, index, k)`` draws one problem (default :func:`make_problem`; the routes world has its own)."""
    make = make or make_problem
    rng = random.Random(seed)
    ks = list(ks)
    val_ks = [ks[i % len(ks)] for i in range(n_val)]
    index = itertools.count()
    val: list[SumProblem] = []
    held_out: set[str] = set()
    for k in val_ks:
        while (p := make(rng, next(index), k)).problem in held_out:
            pass                                           # a repeat (only likely for small k) is drawn again
        held_out.add(p.problem)
        val.append(p)
    train: list[SumProblem] = []
    while len(train) < n_train:
        p = make(rng, next(index))
        if p.problem not in held_out:
            train.append(p)
    return train, val


def write_jsonl(problems: list[SumProblem], path: Path) -> None:
    problems_io.write_jsonl(map(asdict, problems), path)


def write_splits(out: Path, train: list[SumProblem], val: list[SumProblem]) -> None:
    """``out/data/{train,val}.jsonl``: a written-out world's splits (reasoning, routes)."""
    (out / "data").mkdir(parents=True)
    write_jsonl(train, out / "data" / "train.jsonl")
    write_jsonl(val, out / "data" / "val.jsonl")


def read_jsonl(path: Path, cls: type[SumProblem] = SumProblem) -> list[SumProblem]:
    """The problems :func:`write_jsonl` wrote, k included (``load_problems`` keeps the common fields)."""
    return [cls(**{k: row[k] for k in ("id", "data_source", "problem", "answer", "k")})
            for row in problems_io.read_jsonl(path)]
