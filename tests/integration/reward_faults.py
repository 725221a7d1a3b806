"""Reward pools with faulty workers, for the pool's and the generation actor's fault tests. Module level, so Ray
pickles the classes by reference (workers and actors import this module)."""

from __future__ import annotations

import time

from rewards.call_watch import call_limit_s
from rewards.config import RewardConfig
from rewards.scoring import score_requests
from rewards.workers import RewardPool, RewardWorkerImpl

HANG, NAP = "hang", "nap"         # answers on which a StallingWorker hangs / naps 1.8 s
# a call of one math group may run math_group_timeout_s + reward_call_grace_s = 3 s once its worker starts it
FAST_LIMITS = RewardConfig(math_timeout_s=2.0, math_group_timeout_s=1.0, reward_call_grace_s=2.0,
                           code_test_timeout_s=1.0, code_memory_mb=256, worker_num_cpus=0.25)


class StallingWorker(RewardWorkerImpl):
    """Hangs on a call holding a group whose answer is HANG (a verifier stuck in C, say); naps on NAP."""

    def score_many(self, requests, call_id=""):
        self.call.start(call_id, call_limit_s(requests, self.cfg))      # the stall is part of the call
        try:
            if any(r.answer == HANG for r in requests):
                time.sleep(3600)
            if any(r.answer == NAP for r in requests):
                time.sleep(1.8)
            results = score_requests(requests, self.cfg, self.verifier)
        finally:
            self.call.stop()
        self.groups_scored += len(results)
        return results


class StallingPool(RewardPool):
    worker_impl = StallingWorker


class NoLauncherWorker(RewardWorkerImpl):
    """A worker whose sandbox launcher cannot start (no process left to fork)."""

    def __init__(self, cfg=None):
        super().__init__(cfg)
        import rewards.code_reward

        def no_fork(*args):
            raise BlockingIOError(11, "Resource temporarily unavailable")

        rewards.code_reward.run_tests = no_fork


class NoLauncherPool(RewardPool):
    worker_impl = NoLauncherWorker
