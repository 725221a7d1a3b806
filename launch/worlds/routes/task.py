"""The routes world's task: a sum of k one-digit operands, solved along one of many equivalent routes.

A problem names its operands with letters, one per line; a solution is one line per operand, each
first copying the operand it takes from the prompt (`c3`), then the running total, then the box:

    Q: Add:        A: d8 ok              start from the last operand (backward)
    a7                c3;3+8=11          add c, operand first (x+t)
    b5                b5->11+5=16 good   add b, total first (t+x), checked
    c3                a7 so=23           add a without writing the sum out ("short")
    d8                \\boxed{23}

The freedom is real, as in a distilled reasoning model's traces: the order of the steps (forward
from a, or backward from the last letter), how each addition is written (six equivalent
separators; t+x, x+t or the short form) and an optional check word on any line. Each SFT trace
draws every choice afresh (`sample_trace`), so the warmed-up policy keeps a spread of routes
(`route_entropy_nats`: 0.389 nats of choice per response token in the data), and the choices are
not equally easy to finish correctly: the warmed-up policy (seed 0, τ=1) gets a short line right
80% of the time, a t+x line 91%, an x+t line 88%, and 16% of its responses skip or repeat an
operand or leave the grammar (the figures are in the world's manifest). RL can raise accuracy by
moving to the easy choices and dropping the idle ones: that is the entropy it has to lose.

Why this grammar (measured with the 4-layer model on 2 cores): a line starts with the same two
tokens as its prompt line (letter, digit), so fetching the operand is a plain induction-head copy;
with `c=3` in the prompt (three tokens) the model had not learned the fetch after 500 steps. Orders
that must remember which operands were used (any order, or swapping a step with the next) left
most sampled responses repeating or skipping an operand, so the order's freedom is its direction.

The slips world (``--slips``) is this grammar written by another teacher (`SLIPS_TEACHER`): `,` and
no check word are its likeliest choices and never slip, while after a rarer separator or a check word
it writes a wrong sum (off by 1 or 2, carried on to the box) 25-65% of the time. The warmed-up policy
learns that, so there separators and check words change the reward too, and RL takes their entropy away.

k (K_MIN..K_MAX) is drawn per problem, so responses grow with difficulty: a median of 28 sampled
tokens for k=3 up to 96 for k=K_MAX. Splits are a deterministic function of the seed, validation
problems never appear in training, and math-verify (rewards.math) scores the box like any run's answers.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from launch.worlds.reasoning import task as reasoning_task

PROMPT_TEMPLATE = reasoning_task.PROMPT_TEMPLATE
DATA_SOURCE = "routes_sum"
K_MIN, K_MAX = 3, 10            # operands per problem (one letter each)
LETTERS = reasoning_task.LETTERS
MIN_OPERAND, MAX_OPERAND = reasoning_task.MIN_OPERAND, reasoning_task.MAX_OPERAND

# Every choice of a route and its frequency in the SFT data.
DIRECTIONS = {"forward": 0.6, "backward": 0.4}      # a, b, c, ... or from the last letter down
SEPARATORS = (",", ";", ":", "|", "->", " so")      # equivalent, chosen uniformly per addition
FORMS = {"t+x": 0.4, "x+t": 0.3, "short": 0.3}       # how an addition is written
CHECKS = {"": 0.5, " ok": 0.5 / 3, " good": 0.5 / 3, " yes": 0.5 / 3}    # a check word after a line, or none
SLIPS = (-2, -1, 1, 2)                               # how far a slipped sum is off


@dataclass(frozen=True)
class Teacher:
    """Who writes the SFT traces: the operand counts, how often each separator and check word is chosen,
    and how often the addition after each one slips (its sum off by one of SLIPS, carried on to the box)."""

    name: str
    k_min: int = K_MIN
    k_max: int = K_MAX
    separators: dict[str, float] | None = None          # None: uniform, drawn as the routes world always drew them
    checks: dict[str, float] = field(default_factory=lambda: dict(CHECKS))
    slip_after_separator: dict[str, float] = field(default_factory=dict)    # separator -> P(slip)
    slip_after_check: dict[str, float] = field(default_factory=dict)        # previous line's check -> P(slip), added

    @property
    def slips(self) -> bool:
        return bool(self.slip_after_separator or self.slip_after_check)


# The routes world's teacher never slips: separators and check words are free and reward-idle.
ROUTES_TEACHER = Teacher("routes")
# The slips world's: `,` and no check word are the likeliest choices and never slip; a line written
# with another separator slips 40% of the time, and one after a check word 25% more. k <= 7 keeps
# accuracy at 20-50% with that many slips.
SLIPS_TEACHER = Teacher(
    "slips", k_max=7,
    separators={",": 0.6, **{s: 0.08 for s in SEPARATORS if s != ","}},
    checks={"": 0.7, " ok": 0.1, " good": 0.1, " yes": 0.1},
    slip_after_separator={s: 0.0 if s == "," else 0.4 for s in SEPARATORS},
    slip_after_check={"": 0.0, " ok": 0.25, " good": 0.25, " yes": 0.25})


@dataclass(frozen=True)
class SumProblem(reasoning_task.SumProblem):
    """One problem: the reasoning world's record (id, data_source, problem, answer, k; operands, prompt),
    whose solution is the plainest route."""

    @property
    def solution(self) -> str:
        return render(self.operands, plain_route(self.k))


@dataclass(frozen=True)
class Route:
    """Every choice of one solution: the direction and, per line, separator, form, check word."""

    direction: str                  # forward / backward
    separators: tuple[str, ...]     # one per line after the first (the first line only names its operand)
    forms: tuple[str, ...]          # one per line after the first
    checks: tuple[str, ...]         # one per line ("" = none)
    slips: tuple[int, ...] = ()     # per line after the first: 0, or how far the teacher's sum is off


def problem_text(operands: list[int]) -> str:
    """One `letter digit` per line: two tokens (Qwen2's pre-tokeniser splits a letter from a digit),
    the same two a solution line starts with."""
    return "Add:\n" + "\n".join(f"{name}{x}" for name, x in zip(LETTERS, operands))


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def sample_route(rng: random.Random, k: int, teacher: Teacher = ROUTES_TEACHER) -> Route:
    """Draw every choice of a solution with the teacher's frequencies, then its slips (a teacher that
    never slips draws nothing more: the routes world's data stay what they were)."""
    direction = _pick(rng, DIRECTIONS)
    separators = tuple(rng.choice(SEPARATORS) if teacher.separators is None else _pick(rng, teacher.separators)
                       for _ in range(k - 1))
    forms = tuple(_pick(rng, FORMS) for _ in range(k - 1))
    checks = tuple(_pick(rng, teacher.checks) for _ in range(k))
    slips = ()
    if teacher.slips:      # line n+1's slip: its separator's rate plus the rate after line n's check word
        slips = tuple(rng.choice(SLIPS) if rng.random() < (teacher.slip_after_separator.get(sep, 0.0)
                                                            + teacher.slip_after_check.get(check, 0.0)) else 0
                      for sep, check in zip(separators, checks[:-1]))
    return Route(direction, separators, forms, checks, slips)


def render(operands: list[int], route: Route) -> str:
    """The response text of a route: one line per operand, then the box."""
    order = list(range(len(operands)))
    if route.direction == "backward":
        order.reverse()
    total = operands[order[0]]
    lines = [f"{LETTERS[order[0]]}{total}"]
    slips = route.slips or (0,) * (len(operands) - 1)
    for i, sep, form, slip in zip(order[1:], route.separators, route.forms, slips):
        x, new = operands[i], total + operands[i] + slip
        body = {"t+x": f"{total}+{x}={new}", "x+t": f"{x}+{total}={new}", "short": f"={new}"}[form]
        lines.append(f"{LETTERS[i]}{x}{sep}{body}")
        total = new
    return "\n".join(line + check for line, check in zip(lines, route.checks)) + f"\n\\boxed{{{total}}}"


def sample_trace(problem: SumProblem, rng: random.Random, teacher: Teacher = ROUTES_TEACHER) -> str:
    return render(problem.operands, sample_route(rng, problem.k, teacher))


def plain_route(k: int) -> Route:
    """The plainest route: forward, ',' and t+x on every line, no checks."""
    return Route("forward", (",",) * (k - 1), ("t+x",) * (k - 1), ("",) * k)


_SEP = "|".join(re.escape(s) for s in SEPARATORS)
_CHECK = "|".join(re.escape(c) for c in CHECKS if c)
# one line of a trace: its letter and operand, then (after the first line) a separator and the addition,
# written in full (a+b=s) or short (=s), then an optional check word; the parser and the entropy split share it
LINE = re.compile(rf"(?P<letter>[a-p])(?P<digit>\d)"
                  rf"(?:(?P<sep>{_SEP})(?P<body>(?P<a>\d+)\+(?P<b>\d+)=(?P<s>\d+)|=(?P<short>\d+)))?"
                  rf"(?P<check>{_CHECK})?")


@dataclass(frozen=True)
class ParsedRoute:
    """What a response did: the letters it took, how it wrote each addition and whether each line
    holds (the letter's own operand copied, the running total carried, the sum right)."""

    letters: tuple[str, ...]
    forms: tuple[str, ...]          # t+x / x+t / short / other (two numbers that are not total and operand)
    line_ok: tuple[bool, ...]       # one per line after the first
    boxed: int
    route: str                      # forward / backward / invalid (an operand skipped, repeated or unknown)
    separators: tuple[str, ...]     # one per line after the first
    checks: tuple[str, ...]         # one per line ("" = none)

    @property
    def arithmetic_ok(self) -> bool:
        return all(self.line_ok)


def parse_response(text: str, problem: SumProblem) -> ParsedRoute | None:
    """The route of a response, or None when it does not follow the grammar of `render`."""
    *lines, box = text.strip("\n").split("\n")
    m_box = re.fullmatch(r"\\boxed\{(\d+)\}", box)
    if not lines or not m_box:
        return None
    values = dict(zip(LETTERS, problem.operands))
    letters, forms, line_ok, separators, checks, total = [], [], [], [], [], 0
    for n, line in enumerate(lines):
        m = LINE.fullmatch(line)
        if not m or (n == 0) != (m["sep"] is None):      # only the first line adds nothing
            return None
        checks.append(m["check"] or "")
        x = int(m["digit"])
        right = values.get(m["letter"]) == x
        if n == 0:
            total = x
        else:
            separators.append(m["sep"])
            if m["short"] is not None:
                forms.append("short")
                new = int(m["short"])
            else:
                a, b, new = int(m["a"]), int(m["b"]), int(m["s"])
                forms.append("t+x" if (a, b) == (total, x) else "x+t" if (a, b) == (x, total) else "other")
            line_ok.append(right and new == total + x and forms[-1] != "other")
            total = new
        letters.append(m["letter"])
    k, boxed = problem.k, int(m_box.group(1))
    line_ok[-1:] = [bool(line_ok) and line_ok[-1] and total == boxed]       # the box copies the last total
    route = {tuple(LETTERS[:k]): "forward", tuple(LETTERS[:k][::-1]): "backward"}.get(tuple(letters), "invalid")
    return ParsedRoute(tuple(letters), tuple(forms), tuple(line_ok), boxed, route=route,
                       separators=tuple(separators), checks=tuple(checks))


def _h(weights) -> float:
    total = sum(weights)
    return -sum(w / total * math.log(w / total) for w in weights if w > 0)


def route_entropy_nats(k: int, teacher: Teacher = ROUTES_TEACHER) -> float:
    """Entropy (nats) of the choices in one SFT trace with k >= 2 operands: direction, separators,
    forms, check words (a teacher's slips are errors, not choices: not counted). Exact, because every
    route gives a different text."""
    separators = math.log(len(SEPARATORS)) if teacher.separators is None else _h(teacher.separators.values())
    return (_h(DIRECTIONS.values()) + k * _h(teacher.checks.values())
            + (k - 1) * (separators + _h(FORMS.values())))


def make_problem(rng: random.Random, index: int, k: int | None = None, k_max: int = K_MAX) -> SumProblem:
    """k operands drawn from rng (k itself too, uniformly in K_MIN..k_max, when not given)."""
    k = k if k is not None else rng.randint(K_MIN, k_max)
    operands = [rng.randint(MIN_OPERAND, MAX_OPERAND) for _ in range(k)]
    return SumProblem(id=f"route-{index:06d}", data_source=DATA_SOURCE, problem=problem_text(operands),
                      answer=str(sum(operands)), k=k)


def make_splits(seed: int, n_train: int = 20000, n_val: int = 240,
                teacher: Teacher = ROUTES_TEACHER) -> tuple[list[SumProblem], list[SumProblem]]:
    """(train, validation), disjoint by problem text, as the reasoning world draws them
    (``reasoning.task.make_splits``): validation cycles through k (K_MIN, K_MIN+1, ...), so any prefix of
    it is balanced over k; training k is uniform, repeats allowed, validation excluded."""
    def make(rng: random.Random, index: int, k: int | None = None) -> SumProblem:
        return make_problem(rng, index, k, teacher.k_max)

    return reasoning_task.make_splits(seed, n_train, n_val, make=make, ks=range(teacher.k_min, teacher.k_max + 1))


write_jsonl = reasoning_task.write_jsonl


def read_jsonl(path: Path) -> list[SumProblem]:
    """The problems :func:`write_jsonl` wrote, k included."""
    return reasoning_task.read_jsonl(path, SumProblem)
