"""Reward workers: Ray actors that score whole groups in parallel, and the pool that balances them.

Where scoring sits in the data flow (decision by the lead, DESIGN.md §1): a generation actor hands
each finished group to the reward pool *before* writing it to the `groups` stream, so that stream
only ever holds scored groups and the learner never waits on a verifier. The actor submits and keeps
generating (RewardPool.submit returns an ObjectRef; GenerationActor scores in a thread), so a slow
verifier overlaps generation instead of stalling it; only the buffer write waits for the scores.

Each RewardWorker owns one math-verify subprocess (see rewards.math_verifier) and runs code
sandboxes one at a time, so `num_workers` is the scoring parallelism; fractional `num_cpus`
(default 0.25) lets several workers share a core since most of their time is spent waiting on
those subprocesses. The pool sends each call to the worker with the fewest calls in flight
(least-loaded), which keeps one slow group (a code sandbox timing out) from queueing fast math
groups behind it the way round-robin would. A call holds one group or several (``score_many``: a
generation actor sends the math groups one engine step finished in at most one call per worker, since a
Ray call costs ~2 ms of CPU on each side, more than math-verify needs for a small group; a group that
may run code goes alone, as its sandboxes may take seconds).
`score_group` (in-process, same semantics) is re-exported here for callers that have no Ray
(tests, evaluation, GenerationActor's default).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import ray

from rewards.config import RewardConfig
from rewards.math_verifier import MathVerifier
from rewards.result import RewardResult, ScoreRequest
from rewards.sandbox import sweep_stale_cgroups
from rewards.scoring import score_group, score_request, score_requests

__all__ = ["RewardPool", "RewardWorker", "score_group"]


class _RewardWorkerImpl:
    def __init__(self, cfg: dict | None = None):
        self.cfg = RewardConfig.model_validate(cfg or {})
        self.verifier = MathVerifier(self.cfg.math_timeout_s, self.cfg.math_kill_grace_s,
                                     self.cfg.math_startup_timeout_s, self.cfg.math_memory_mb,
                                     self.cfg.math_group_timeout_s)
        self.verifier.start()  # pay the sympy import at pool start, not on the first group
        sweep_stale_cgroups()  # what a crashed worker (this one's previous life, say) left behind
        self.groups_scored = 0

    def score(self, request: ScoreRequest) -> list[RewardResult]:
        results = score_request(request, self.cfg, self.verifier)
        self.groups_scored += 1
        return results

    def score_many(self, requests: list[ScoreRequest]) -> list[list[RewardResult] | Exception]:
        """Several groups in one call (``rewards.scoring.score_requests``)."""
        results = score_requests(requests, self.cfg, self.verifier)
        self.groups_scored += sum(not isinstance(r, Exception) for r in results)   # as score: raised, not scored
        return results

    def stats(self) -> dict:
        return {"groups_scored": self.groups_scored, "verifier_restarts": self.verifier.restarts}

    def ready(self) -> bool:
        return True

    def shutdown(self) -> None:
        self.verifier.close()


RewardWorker = ray.remote(_RewardWorkerImpl)


class RewardPool:
    """N RewardWorker actors behind least-loaded dispatch. Picklable, so a driver can create one and
    pass it to generation actors, which call `score_many` from their scoring threads.

    A copy travels as the workers' names, not their handles, and looks them up on arrival: an actor
    constructor argument that holds handles is kept by reference, and a restarted actor could lose
    it (Ray warns about exactly that); names never go stale. The in-flight bookkeeping starts empty
    in each copy."""

    def __init__(self, num_workers: int | None = None, cfg: RewardConfig | None = None):
        self.cfg = cfg or RewardConfig()
        n = num_workers or self.cfg.resolved_num_workers()
        self.names = [f"lagrl-reward-{uuid.uuid4().hex[:12]}-{i}" for i in range(n)]
        # Scoring is idempotent, so a crashed worker is restarted and its groups retried.
        self.workers = [RewardWorker.options(name=name, num_cpus=self.cfg.worker_num_cpus, max_restarts=-1,
                                             max_task_retries=2).remote(self.cfg.model_dump())
                        for name in self.names]
        ray.get([w.ready.remote() for w in self.workers])
        self._init_bookkeeping()

    def _init_bookkeeping(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: list[list[ray.ObjectRef]] = [[] for _ in self.workers]

    def __getstate__(self) -> dict:
        return {"cfg": self.cfg, "names": self.names}

    def __setstate__(self, state: dict) -> None:
        self.cfg, self.names = state["cfg"], state["names"]
        self.workers = [ray.get_actor(name) for name in self.names]
        self._init_bookkeeping()

    @property
    def parallelism(self) -> int:
        """Calls the pool runs at once (one per worker): a caller keeps this many in flight to use every worker."""
        return len(self.names)

    def submit(self, request: ScoreRequest) -> ray.ObjectRef:
        """Non-blocking: an ObjectRef to list[RewardResult], on the least-loaded worker."""
        return self._dispatch("score", request)

    def submit_many(self, requests: Sequence[ScoreRequest]) -> ray.ObjectRef:
        """Non-blocking, several groups in one call on the least-loaded worker: an ObjectRef to one entry per
        group, its results or the exception its scoring raised. A Ray call costs ~2 ms of CPU on each
        side, more than math-verify takes for a small group: groups that finish together share one."""
        return self._dispatch("score_many", list(requests))

    def _dispatch(self, method: str, arg) -> ray.ObjectRef:
        with self._lock:
            for refs in self._in_flight:
                if refs:
                    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
                    for ref in done:
                        refs.remove(ref)
            i = min(range(len(self.workers)), key=lambda k: len(self._in_flight[k]))
            ref = getattr(self.workers[i], method).remote(arg)
            self._in_flight[i].append(ref)
            return ref

    def score_groups(self, items: Sequence[ScoreRequest]) -> list[list[RewardResult]]:
        """Score many groups in parallel; results in input order."""
        return ray.get([self.submit(item) for item in items])

    def score_many(self, requests: Sequence[ScoreRequest]) -> list[list[RewardResult] | Exception]:
        """Blocking, several groups in one call: the `scorer.score_many(requests)` GenerationActor calls."""
        return ray.get(self.submit_many(requests))

    def stats(self) -> list[dict]:
        return ray.get([w.stats.remote() for w in self.workers])

    def shutdown(self) -> None:
        """Close the verifier subprocesses and kill the actors."""
        try:
            ray.get([w.shutdown.remote() for w in self.workers], timeout=30)
        finally:
            for w in self.workers:
                ray.kill(w)
            self.workers = []
