"""The messages that cross the buffer, as Python objects: prompts and trajectory groups.

How they are written to and read from Redis is ``buffer.codec``; this module holds only the
types (DESIGN.md §2's data contract) and the error every decoder raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class InvalidMessage(ValueError):
    """A payload that cannot be used; ``reason`` is a short machine-readable tag."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class PromptMsg:
    """One prompt to sample ``n_samples`` responses for (the ``prompts`` stream)."""

    prompt_id: str            # unique per issuance: the group produced from it has group_id == prompt_id
    data_source: str          # e.g. "tiny_arith", "aime24"
    prompt_ids: np.ndarray    # (P,) int32 prompt token ids
    answer: str               # gold answer (math) or JSON-encoded tests (code)
    n_samples: int            # group size gs
    max_tokens: int           # response budget for this prompt's stage
    step: int                 # learner step this prompt is issued for
    min_version: int          # admission: start only with policy weights of at least this version
    stage: int = 0
    temperature: float = 1.0  # sampling temperature tau (the learner divides its logits by the same)
    meta: dict[str, Any] = field(default_factory=dict)
    # fixed-lag mode: sample with exactly this version (an older one than the newest, if need be),
    # and no weight swap while it runs; None = any version >= min_version
    pin_version: int | None = None
    # a sampling seed of its own (vLLM's per-request seed): the same weights give the same responses whatever
    # else the engine serves meanwhile (the entropy probe, launch.run.probe); None = the engine's stream
    seed: int | None = None


@dataclass
class Response:
    """One sampled response with what the learner needs to correct for off-policyness."""

    token_ids: np.ndarray     # (L,) int32
    logprobs: np.ndarray      # (L,) float32 behaviour log-prob of each sampled token
    finish_reason: str        # "stop" | "length" | "abort"
    version_start: int        # policy version when sampling began
    version_end: int          # policy version when it finished (> start: weights swapped mid-response)
    reward: float = 0.0
    reward_info: dict[str, Any] = field(default_factory=dict)  # reason, extracted answer, ...

    @property
    def length(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


# The hops a group's ``trace`` may record, in the order they happen (unix seconds):
# issued (its prompt entered the prompts stream), taken (an actor read it), loaded (that actor's
# engine got the weights the group started with), started (request added to the engine),
# generated (its last response finished), scored (its rewards came back).
TRACE_HOPS = ("issued", "taken", "loaded", "started", "generated", "scored")


@dataclass
class Group:
    """All responses to one prompt (the ``groups`` stream); the learner's unit of data."""

    group_id: str
    prompt_id: str
    data_source: str
    step: int
    prompt_ids: np.ndarray    # (P,) int32
    answer: str
    responses: list[Response]
    actor_id: str
    stage: int = 0
    max_tokens: int = 0       # the response budget it was sampled with (its prompt's); 0 = not recorded
    created_at: float = 0.0   # when the prompt was taken
    finished_at: float = 0.0  # when the last response finished
    # unix times of the group's hops through the loop (``buffer.messages.TRACE_HOPS``); the learner
    # turns them into the step's critical path (``learner.step_path``). Empty: not recorded.
    trace: dict[str, float] = field(default_factory=dict)

    @property
    def rewards(self) -> np.ndarray:
        return np.array([r.reward for r in self.responses], dtype=np.float64)
