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

Every blocking wait on a worker has a limit (rewards.call_watch): a call that runs past its groups'
budgets plus reward_call_grace_s raises RewardTimeout, and its hung worker is killed and restarted.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import ray

from rewards.call_watch import PROBE_TIMEOUT_S, RunningCall, await_call, call_limit_s
from rewards.code_isolation import SandboxRefused, check_code_isolation
from rewards.config import RewardConfig
from rewards.math_verifier import MathVerifier
from rewards.result import RewardResult, ScoreRequest
from rewards.sandbox import sweep_stale_cgroups
from rewards.scoring import score_group, score_request, score_requests

__all__ = ["RewardPool", "RewardWorker", "RewardWorkerImpl", "score_group"]


class RewardWorkerImpl:
    """One scoring call at a time (the default concurrency group), and ``running`` on a thread of its own,
    so a caller can ask a busy worker how long its call has run (rewards.call_watch)."""

    def __init__(self, cfg: dict | None = None):
        self.cfg = RewardConfig.model_validate(cfg or {})
        self.verifier = MathVerifier(self.cfg.math_timeout_s, self.cfg.math_kill_grace_s,
                                     self.cfg.math_startup_timeout_s, self.cfg.math_memory_mb,
                                     self.cfg.math_group_timeout_s)
        self.verifier.start()  # pay the sympy import at pool start, not on the first group
        sweep_stale_cgroups()  # what a crashed worker (this one's previous life, say) left behind
        self.groups_scored = 0
        self.call = RunningCall()

    def score(self, request: ScoreRequest, call_id: str = "") -> list[RewardResult]:
        self.call.start(call_id, call_limit_s([request], self.cfg))
        try:
            results = score_request(request, self.cfg, self.verifier)
        finally:
            self.call.stop()
        self.groups_scored += 1
        return results

    def score_many(self, requests: list[ScoreRequest], call_id: str = "") -> list[list[RewardResult] | Exception]:
        """Several groups in one call (``rewards.scoring.score_requests``)."""
        self.call.start(call_id, call_limit_s(requests, self.cfg))
        try:
            results = score_requests(requests, self.cfg, self.verifier)
        finally:
            self.call.stop()
        self.groups_scored += sum(not isinstance(r, Exception) for r in results)   # as score: raised, not scored
        return results

    @ray.method(concurrency_group="watch")
    def running(self) -> tuple[str, float, float] | None:
        """(call id, seconds it has run, its limit) of the call running now; None when idle."""
        return self.call.read()

    @ray.method(concurrency_group="watch")      # answers while a call runs
    def stats(self) -> dict:
        return {"groups_scored": self.groups_scored, "verifier_restarts": self.verifier.restarts}

    def ready(self) -> bool:
        return True

    def code_isolation(self) -> dict:
        """What the sandbox walls off on this worker's host (``rewards.code_isolation``): {"isolation": [...]}, or
        {"refused": the error line} where code_isolation is strict and a wall is missing."""
        try:
            return {"isolation": list(check_code_isolation(self.cfg))}
        except SandboxRefused as exc:
            return {"refused": str(exc)}

    def shutdown(self) -> None:
        self.verifier.close()


def _remote(impl: type):
    return ray.remote(concurrency_groups={"watch": 1})(impl)


RewardWorker = _remote(RewardWorkerImpl)


class RewardPool:
    """N RewardWorker actors behind least-loaded dispatch. Picklable, so a driver can create one and
    pass it to generation actors, which call `score_many` from their scoring threads.

    A copy travels as the workers' names, not their handles, and looks them up on arrival: an actor
    constructor argument that holds handles is kept by reference, and a restarted actor could lose
    it (Ray warns about exactly that); names never go stale. The in-flight bookkeeping starts empty
    in each copy."""

    worker_impl: type = RewardWorkerImpl     # what each worker runs (a fault test swaps in a faulty one)

    def __init__(self, num_workers: int | None = None, cfg: RewardConfig | None = None, *, code: bool = False):
        """``code``: the run has problems scored by the code sandbox; every worker then checks its sandbox's
        isolation before any program runs (SandboxRefused names what is missing; ``code_isolation`` is the
        walls every worker has)."""
        self.cfg = cfg or RewardConfig()
        n = num_workers or self.cfg.resolved_num_workers()
        self.names = [f"lagrl-reward-{uuid.uuid4().hex[:12]}-{i}" for i in range(n)]
        worker = RewardWorker if self.worker_impl is RewardWorkerImpl else _remote(self.worker_impl)
        # Scoring is idempotent, so a crashed worker is restarted and its groups retried.
        self.workers = [worker.options(name=name, num_cpus=self.cfg.worker_num_cpus, max_restarts=-1,
                                       max_task_retries=2).remote(self.cfg.model_dump())
                        for name in self.names]
        ray.get([w.ready.remote() for w in self.workers])
        self._init_bookkeeping()
        self.code_isolation: tuple[str, ...] | None = self._check_code_isolation() if code else None

    def _check_code_isolation(self) -> tuple[str, ...]:
        """Once, at start: each worker runs a trivial program in its sandbox. A refusal stops the pool (its
        workers are killed) with the worker's error line; else the walls all of them have."""
        reports = ray.get([w.code_isolation.remote() for w in self.workers], timeout=300)
        refused = next((r["refused"] for r in reports if "refused" in r), None)
        if refused is not None:
            self.shutdown()
            raise SandboxRefused(refused)
        return tuple(wall for wall in reports[0]["isolation"] if all(wall in r["isolation"] for r in reports))

    def _init_bookkeeping(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: list[list[ray.ObjectRef]] = [[] for _ in self.workers]

    def __getstate__(self) -> dict:
        return {"cfg": self.cfg, "names": self.names, "code_isolation": self.code_isolation}

    def __setstate__(self, state: dict) -> None:
        self.cfg, self.names, self.code_isolation = state["cfg"], state["names"], state["code_isolation"]
        self.workers = [ray.get_actor(name) for name in self.names]
        self._init_bookkeeping()

    @property
    def parallelism(self) -> int:
        """Calls the pool runs at once (one per worker): a caller keeps this many in flight to use every worker."""
        return len(self.names)

    def submit(self, request: ScoreRequest) -> ray.ObjectRef:
        """Non-blocking: an ObjectRef to list[RewardResult], on the least-loaded worker. Its caller's wait
        has no limit: the blocking methods below wait with one."""
        return self._dispatch("score", request)[0]

    def submit_many(self, requests: Sequence[ScoreRequest]) -> ray.ObjectRef:
        """Non-blocking, several groups in one call on the least-loaded worker: an ObjectRef to one entry per
        group, its results or the exception its scoring raised. A Ray call costs ~2 ms of CPU on each
        side, more than math-verify takes for a small group: groups that finish together share one."""
        return self._dispatch("score_many", list(requests))[0]

    def _dispatch(self, method: str, arg) -> tuple[ray.ObjectRef, int, str]:
        """(the call's ref, its worker's index, its id)."""
        call_id = uuid.uuid4().hex
        with self._lock:
            for refs in self._in_flight:
                if refs:
                    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
                    for ref in done:
                        refs.remove(ref)
            i = min(range(len(self.workers)), key=lambda k: len(self._in_flight[k]))
            ref = getattr(self.workers[i], method).remote(arg, call_id)
            self._in_flight[i].append(ref)
            return ref, i, call_id

    def _start(self, method: str, requests: list[ScoreRequest]) -> Callable[[], Any]:
        """Dispatch a call now; the function returned waits for its result, within the call's limit
        (rewards.call_watch: RewardTimeout past it, its hung worker killed and restarted)."""
        ref, i, call_id = self._dispatch(method, requests if method == "score_many" else requests[0])
        limit_s = call_limit_s(requests, self.cfg)
        return lambda: await_call(ref, self.workers[i], call_id, limit_s)

    def score_groups(self, items: Sequence[ScoreRequest]) -> list[list[RewardResult]]:
        """Score many groups in parallel (one call each); results in input order."""
        waits = [self._start("score", [item]) for item in items]
        return [wait() for wait in waits]

    def score_many(self, requests: Sequence[ScoreRequest]) -> list[list[RewardResult] | Exception]:
        """Blocking, several groups in one call: the `scorer.score_many(requests)` GenerationActor calls."""
        return self._start("score_many", list(requests))()

    def stats(self) -> list[dict]:
        return ray.get([w.stats.remote() for w in self.workers], timeout=PROBE_TIMEOUT_S)

    def shutdown(self) -> None:
        """Close the verifier subprocesses and kill the actors."""
        try:
            ray.get([w.shutdown.remote() for w in self.workers], timeout=30)
        finally:
            for w in self.workers:
                ray.kill(w)
            self.workers = []
