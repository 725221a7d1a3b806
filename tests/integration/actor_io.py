"""What actor tests put into the buffer and take out of it: arithmetic prompts, collected groups."""

from __future__ import annotations

import time

import numpy as np

from buffer import PromptMsg, RunBuffer


def arith_prompts(tok, tag: str, problems, *, n: int = 4, max_tokens: int = 12, step: int = 0,
                  min_version: int = 0) -> list[PromptMsg]:
    """One prompt per (a, b): "Q: a+b\\nA: " with answer a + b, ids ``<tag>-<i>``."""
    return [PromptMsg(prompt_id=f"{tag}-{i}", data_source="tiny_arith",
                      prompt_ids=np.array(tok(f"Q: {a}+{b}\nA: ")["input_ids"], dtype=np.int32),
                      answer=str(a + b), n_samples=n, max_tokens=max_tokens, step=step, min_version=min_version)
            for i, (a, b) in enumerate(problems)]


def collect_groups(buf: RunBuffer, want: int, timeout: float = 120.0) -> list:
    """Up to ``want`` groups taken and ACKed within ``timeout`` seconds (fewer when they do not come)."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        batch = buf.take_groups("test-learner", count=want - len(got), block_ms=500)
        if batch:
            buf.ack_groups([e for e, _ in batch], [g.group_id for _, g in batch])
            got += [g for _, g in batch]
    return got
