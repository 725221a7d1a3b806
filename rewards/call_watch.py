"""How long a reward call may run, and the caller's wait for it that gives up on a hung worker.

A call's limit is its groups' budgets (code_group_timeout_s, plus the late responses' short timers, per group that may run code,
math_group_timeout_s per math group) plus reward_call_grace_s. It is counted from when the worker
starts the call, not from when it was sent: a RewardWorker runs its calls one at a time and every
generation actor sends to the same workers, so a call may rightly wait behind several others. The
worker says which call it runs and for how long (``RewardWorker.running``, answered on a thread of its
own while a call runs), and the caller asks it whenever its wait runs out.

A call past its limit (or a worker too stuck to answer) is given up: the call is cancelled, so that
Ray does not run it again, the worker is killed and Ray restarts it, and the caller gets RewardTimeout
(its groups are dead-lettered).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from rewards.code_reward import LATE_RESPONSE_S
from rewards.config import RewardConfig
from rewards.result import RewardTimeout, ScoreRequest
from rewards.scoring import may_run_code

PROBE_TIMEOUT_S = 30.0   # a worker whose watch thread does not answer in this long is stuck (the GIL held in C)
IDLE_RECHECK_S = 5.0     # the worker idle and our result not here: in transit, or lost in a restart


def call_limit_s(requests: Sequence[ScoreRequest], cfg: RewardConfig) -> float:
    """Seconds a call holding ``requests`` may run once its worker starts it."""
    return sum(_group_budget_s(r, cfg) for r in requests) + cfg.reward_call_grace_s


def _group_budget_s(req: ScoreRequest, cfg: RewardConfig) -> float:
    code = req.kind == "code" or (req.kind is None and may_run_code(req.answer, req.data_source, cfg))
    if not code:
        return cfg.math_group_timeout_s
    # past its budget each response left still runs LATE_RESPONSE_S (+ ~1 s of launcher) to be judged
    return cfg.code_group_timeout_s + len(req.texts) * (LATE_RESPONSE_S + 1.0)


class RunningCall:
    """The worker's side: which call runs now, since when (``RewardWorker.running`` reads it)."""

    def __init__(self):
        self._now: tuple[str, float, float] | None = None

    def start(self, call_id: str, limit_s: float) -> None:
        self._now = (call_id, time.monotonic(), limit_s)

    def stop(self) -> None:
        self._now = None

    def read(self) -> tuple[str, float, float] | None:
        """(call id, seconds it has run, its limit), or None when idle."""
        now = self._now           # one read: the scoring thread may replace it meanwhile
        return None if now is None else (now[0], time.monotonic() - now[1], now[2])


def await_call(ref: ray.ObjectRef, worker, call_id: str, limit_s: float):
    """``ray.get(ref)``, except that a call that has run ``limit_s`` on ``worker`` raises RewardTimeout."""
    wait_s, idle_since = limit_s, None
    while True:
        done, _ = ray.wait([ref], timeout=wait_s)
        if done:
            return ray.get(ref)
        try:
            running = ray.get(worker.running.remote(), timeout=PROBE_TIMEOUT_S)
        except GetTimeoutError:
            _give_up(ref, worker)
            raise RewardTimeout(f"reward call {call_id}: its worker did not answer within {PROBE_TIMEOUT_S:g} s "
                                "(stuck); killed") from None
        except RayActorError:      # dead or restarting: Ray runs the call again there, or fails it
            wait_s = limit_s
            continue
        if running is None:     # idle, and our result not here: in transit, about to start, or lost in a restart
            now = time.monotonic()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since >= max(limit_s, 2 * IDLE_RECHECK_S):      # idle that long in a row: lost
                ray.cancel(ref)
                raise RewardTimeout(f"reward call {call_id}: not run by its worker, idle for {now - idle_since:.0f} s")
            wait_s = IDLE_RECHECK_S
            continue
        idle_since = None
        other, ran_s, other_limit_s = running
        if other == call_id:
            if ran_s >= limit_s:
                _give_up(ref, worker)
                raise RewardTimeout(f"reward call {call_id}: still running after {ran_s:.0f} s, past its limit "
                                    f"of {limit_s:g} s (its groups' budgets + reward_call_grace_s); worker killed")
            wait_s = limit_s - ran_s
        elif ran_s >= other_limit_s + limit_s:
            # queued behind a call far past its limit that its own caller did not give up (that caller died):
            # nobody else will, and ours would wait forever. Killed, that call is retried on the new process
            # (max_task_retries times at most), and ours runs there too.
            ray.kill(worker, no_restart=False)
            wait_s = limit_s
        else:     # queued behind another call: ask again when that one must be over, or sooner
            wait_s = min(limit_s, other_limit_s + limit_s - ran_s)


def _give_up(ref: ray.ObjectRef, worker) -> None:
    """Cancel the call (a cancelled call is not retried after the kill, nor started if still queued), then
    kill the worker; Ray restarts it (max_restarts=-1). The other calls in flight on it fail with the old
    process and are retried on the new one (max_task_retries): their callers only wait longer."""
    ray.cancel(ref)
    ray.kill(worker, no_restart=False)
