"""The tiny world's task: short integer arithmetic with a `\\boxed{}` answer.

Problems are "a+b" with 0 <= a, b < 50 (a 2-layer model learns this in a minute on 2 cores, so
the warm-up can stop part-way, where RL has room to improve); the gold answer is the integer result, which
math-verify checks against the model's last `\\boxed{}`. Splits are a deterministic function of
the seed, and validation problems never appear in the training split.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

from rewards import problems as problems_io
from rewards.problems import Problem as EvalProblem, load_problems

PROMPT_TEMPLATE = "Q: {problem}\nA: "
DATA_SOURCE = "tiny_arith"


class Problem(EvalProblem):
    """A tiny-world problem: the shared record plus its prompt text."""

    @property
    def prompt(self) -> str:
        return PROMPT_TEMPLATE.format(problem=self.problem)

    @property
    def solution(self) -> str:
        return f"\\boxed{{{self.answer}}}"


MAX_OPERAND = 50


def all_problems() -> list[Problem]:
    return [Problem(f"add-{a}-{b}", DATA_SOURCE, f"{a}+{b}", str(a + b))
            for a in range(MAX_OPERAND) for b in range(MAX_OPERAND)]


def make_splits(seed: int, n_val: int = 256) -> tuple[list[Problem], list[Problem]]:
    """(train, validation): a seeded shuffle of all 2,500 problems, the first n_val held out."""
    problems = all_problems()
    random.Random(seed).shuffle(problems)
    return problems[n_val:], problems[:n_val]


def write_jsonl(problems: list[Problem], path: Path) -> None:
    problems_io.write_jsonl(map(asdict, problems), path)


def read_problems(path: Path) -> list[Problem]:
    """The world's problems written by :func:`write_jsonl`, with their prompt and solution."""
    return [Problem(p.id, p.data_source, p.problem, p.answer) for p in load_problems(path)]
