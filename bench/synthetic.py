"""Synthetic prompts and groups of realistic shape: the buffer benchmark's load and the tests' messages.

    from bench.synthetic import make_group
    make_group("g0", n=16, tokens=4096)      # 16 responses of 4096 random tokens, log-probs, rewards 0/1
"""

from __future__ import annotations

import time

import numpy as np

from buffer.messages import Group, PromptMsg, Response


def make_prompt(prompt_id: str, *, prompt_len: int = 32, n_samples: int = 4, step: int = 0,
                min_version: int = 0, seed: int = 0) -> PromptMsg:
    rng = np.random.default_rng(seed)
    return PromptMsg(prompt_id=prompt_id, data_source="synthetic",
                     prompt_ids=rng.integers(0, 32_000, prompt_len, dtype=np.int32), answer="42",
                     n_samples=n_samples, max_tokens=64, step=step, min_version=min_version,
                     meta={"problem_id": prompt_id})


def make_group(group_id: str, *, n: int = 4, tokens: int | list[int] = 16, version: int = 0,
               prompt_len: int = 32, step: int = 0, actor_id: str = "actor-0", seed: int = 0) -> Group:
    """``n`` responses of ``tokens`` tokens each (or one length per response): random ids,
    log-probs in (-10, 0], rewards 0/1, every response sampled at ``version``."""
    rng = np.random.default_rng(seed)
    lengths = [tokens] * n if isinstance(tokens, int) else list(tokens)
    responses = [Response(token_ids=rng.integers(0, 150_000, length, dtype=np.int32),
                          logprobs=-rng.random(length, dtype=np.float32) * 10,
                          finish_reason="length" if i == 0 else "stop", version_start=version,
                          version_end=version, reward=float(i % 2), reward_info={"reason": "synthetic"})
                 for i, length in enumerate(lengths)]
    now = time.time()
    return Group(group_id=group_id, prompt_id=group_id, data_source="synthetic", step=step,
                 prompt_ids=rng.integers(0, 32_000, prompt_len, dtype=np.int32), answer="42",
                 responses=responses, actor_id=actor_id, created_at=now - 1.0, finished_at=now)
