"""The two value types every reward path shares: what is asked (ScoreRequest), what comes back (RewardResult).

Both are frozen dataclasses of plain fields so they pickle cheaply through Ray and msgpack-free
code paths, and so a result cannot be edited after the verifier decided it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Math reasons (DESIGN.md §7). Anything but CORRECT earns the failure reward; BAD_GOLD earns 0 in every
# mode because the data, not the policy, is at fault (the whole group gets it, so its advantage is 0).
NO_BOX = "no_box"
PARSE_ERROR = "parse_error"
TIMEOUT = "timeout"
WRONG = "wrong"
CORRECT = "correct"
BAD_GOLD = "bad_gold"
# Code-only reasons: the code reward reuses CORRECT, WRONG, TIMEOUT and BAD_GOLD (unparseable test spec).
NO_CODE = "no_code"
SYNTAX_ERROR = "syntax_error"
RUNTIME_ERROR = "runtime_error"
MEMORY = "memory"
SANDBOX_ERROR = "sandbox_error"

MATH_REASONS = frozenset({NO_BOX, PARSE_ERROR, TIMEOUT, WRONG, CORRECT, BAD_GOLD})
CODE_REASONS = frozenset({NO_CODE, SYNTAX_ERROR, RUNTIME_ERROR, MEMORY, SANDBOX_ERROR,
                          TIMEOUT, WRONG, CORRECT, BAD_GOLD})

Kind = Literal["math", "code"]


class RewardSystemError(RuntimeError):
    """The reward system, not the response, failed: the group cannot be judged. A generation actor
    dead-letters its prompt with ``reason`` instead of training on a reward the policy did not earn."""

    reason = "reward_error"


class SandboxUnavailable(RewardSystemError):
    """The code sandbox could not run the program at all: its launcher did not start, or its setup failed
    before any test ran. Never raised for what a program can cause (a launcher it killed, a timeout):
    those stay failures, or breaking the sandbox would be a way out of a negative reward."""

    reason = "sandbox_unavailable"


class RewardTimeout(RewardSystemError):
    """A reward call ran past its limit (RewardPool): the worker hung, or was killed for it."""

    reason = "reward_timeout"


@dataclass(frozen=True)
class RewardResult:
    """One scored response. `reward` is what the learner trains on; `reason` says why (one of
    MATH_REASONS / CODE_REASONS); `extracted` is the boxed answer or the code that was judged (None when
    nothing could be extracted); `detail` is a short human-readable note (never parsed by code)."""

    reward: float
    reason: str
    extracted: str | None
    detail: str = ""

    @property
    def correct(self) -> bool:
        return self.reason == CORRECT


@dataclass(frozen=True)
class ScoreRequest:
    """One finished group: all `texts` share the prompt, so the gold answer / test spec is parsed once.
    `kind` None means route by data source, then by the answer's shape (see rewards.scoring.resolve_kind)."""

    texts: list[str]
    answer: str
    data_source: str = ""
    kind: Kind | None = None
