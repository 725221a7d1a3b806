"""A generation actor's reward calls: which finished groups share a call, and the call itself (decode the
responses, score them), on a thread pool so that scoring overlaps generation.

The groups one engine step finished go out in one scoring call per reward worker at most
(:func:`scoring_calls`): a burst is scored at the pool's width (16 workers on a 16-core GPU host). What
happens to a group after its call (stored with its prompt's ACK, dead-lettered, retried) is the
``ScoringBook``'s (actors.scoring_book).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from actors.scoring_book import Scoring, ScoringBook
from buffer.messages import Group
from rewards.config import RewardConfig
from rewards.scoring import may_run_code


class RewardCalls:
    """``scorer``: the run's reward pool (``score_many``; None: score in this process, for tests and
    single-process tools); ``tokenizer``: the engine's, to decode responses; ``note``: records an error."""

    def __init__(self, actor_id: str, scorer, tokenizer, note: Callable[[str], None]):
        self.scorer, self._tokenizer = scorer, tokenizer
        # finished groups being scored, or scored and not yet stored
        self.book = ScoringBook(lambda groups: self._pool.submit(self._score, groups), note)
        self.width = max(1, getattr(scorer, "parallelism", 1))
        self.reward_cfg = getattr(scorer, "cfg", None) or RewardConfig()    # which groups may run code
        self._pool = ThreadPoolExecutor(max_workers=max(4, self.width), thread_name_prefix=f"{actor_id}-reward")

    def __len__(self) -> int:
        return len(self.book)

    def __iter__(self):
        return iter(self.book)

    def submit(self, finished: list[Scoring]) -> None:
        """Send the groups one engine step finished, in as many calls as :func:`scoring_calls` says."""
        calls = scoring_calls([job.group for job in finished], self.width, self.reward_cfg)
        self.book.add([[finished[i] for i in call] for call in calls])

    def flush(self, block: bool) -> int:
        """Store the scored groups, dead-letter those whose reward failed (all of them when ``block``);
        -> groups stored."""
        return self.book.flush(block)

    def wait(self, timeout: float) -> None:
        self.book.wait(timeout)

    def _score(self, groups: list[Group]) -> tuple[list, float]:
        """(per group its results or the exception its scoring raised, the unix time they came back). The
        text scored is what vLLM's detokenizer gives for those tokens (special tokens skipped; equal on
        3200 tiny samples)."""
        from rewards.result import ScoreRequest

        requests = [ScoreRequest(self._tokenizer.batch_decode([r.token_ids.tolist() for r in g.responses],
                                                              skip_special_tokens=True), g.answer, g.data_source)
                    for g in groups]
        if self.scorer is None:   # in-process scoring (tests, single-process tools)
            from rewards.scoring import score_requests
            results = score_requests(requests)
        else:
            results = self.scorer.score_many(requests)
        return results, time.time()


def scoring_calls(groups: list[Group], width: int, cfg: RewardConfig) -> list[list[int]]:
    """The reward calls for the groups one engine step finished, as lists of their indices. Math groups
    share at most ``width`` calls (the pool's workers): groups finish in bursts at the end of a batch, and
    a call per group cost ~2 ms of CPU on each side, more than math-verify takes for a small group; up to
    ``width`` they still go one per call. A group that may run code goes alone: its sandboxes may take
    seconds, and a call returns all its groups at once."""
    code = [may_run_code(g.answer, g.data_source, cfg) for g in groups]
    alone = [i for i, is_code in enumerate(code) if is_code]
    math = [i for i, is_code in enumerate(code) if not is_code]
    width = min(len(math), width)
    return [[i] for i in alone] + [math[k::width] for k in range(width)]
