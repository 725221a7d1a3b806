"""RewardPool on a local Ray: groups are scored in parallel and equal the in-process scorer's results."""

from __future__ import annotations

import json
import pickle
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray

from rewards.config import RewardConfig
from rewards.result import RewardTimeout, SandboxUnavailable, ScoreRequest
from rewards.scoring import score_group
from rewards.workers import RewardPool
from tests.integration.reward_faults import FAST_LIMITS, HANG, NAP, NoLauncherPool, StallingPool

pytestmark = pytest.mark.integration

CFG = RewardConfig(math_timeout_s=2.0, code_test_timeout_s=1.0, code_memory_mb=256, worker_num_cpus=0.25)
SQUARE = json.dumps({"asserts": ["assert f(2) == 4", "assert f(3) == 9"]})


def _requests() -> list[ScoreRequest]:
    reqs = [ScoreRequest([rf"\boxed{{{a}}}", rf"<think>x</think>\boxed{{{a + 1}}}", "no box", rf"\boxed{{{a}.0}}"],
                         str(a), "aime24") for a in range(6)]
    reqs.append(ScoreRequest([r"\boxed{\frac{1}{2}}", r"\boxed{0.5}", r"\boxed{)(}"], r"\frac12", "math"))
    reqs.append(ScoreRequest(["```python\ndef f(x):\n    return x * x\n```", "```python\ndef f(x):\n    return 4\n```"],
                             SQUARE, "mbpp"))
    reqs.append(ScoreRequest([r"\boxed{1}"], "}{", "broken"))
    return reqs


@pytest.fixture(scope="module")
def pool(ray_local):
    p = RewardPool(num_workers=2, cfg=CFG)
    yield p
    p.shutdown()


def test_pool_matches_in_process_scorer(pool):
    reqs = _requests()
    remote = pool.score_groups(reqs)
    local = [score_group(r.texts, r.answer, r.data_source, CFG, kind=r.kind) for r in reqs]
    assert remote == local
    assert pool.score_many(reqs) == local                  # the groups in one call: the same results
    assert [r.reason for r in remote[0]] == ["correct", "wrong", "no_box", "correct"]
    assert [r.reason for r in remote[-2]] == ["correct", "wrong"] and remote[-2][1].reward == 0.5
    stats = pool.stats()
    assert sum(s["groups_scored"] for s in stats) == 2 * len(reqs)
    assert all(s["groups_scored"] > 0 for s in stats)  # least-loaded dispatch used both workers


def test_pool_is_usable_from_another_actor(pool):
    """GenerationActor receives the pool as `reward_scorer` and calls pool.score_many(requests)."""
    copy = pickle.loads(pickle.dumps(pool))

    @ray.remote(num_cpus=0)
    def call_from_elsewhere(p):
        return p.score_many([ScoreRequest([r"\boxed{7}", r"\boxed{8}"], "7", "aime25"),
                             ScoreRequest([r"\boxed{3}"], "4", "aime25")])

    results = ray.get(call_from_elsewhere.remote(copy))
    assert [[r.reward for r in group] for group in results] == [[1.0, 0.0], [0.0]]
    # a generation actor keeps one scoring call in flight per worker: the copy it gets knows the width
    assert copy.parallelism == pool.parallelism == len(pool.workers) == 2


def test_a_call_past_its_limit_is_given_up_its_worker_restarted_and_the_pool_goes_on(ray_local):
    pool = StallingPool(num_workers=1, cfg=FAST_LIMITS)
    try:
        start = time.monotonic()
        with pytest.raises(RewardTimeout, match="past its limit"):
            pool.score_many([ScoreRequest([r"\boxed{1}"], HANG, "math")])
        assert time.monotonic() - start < 30
        # the hung process was killed and Ray started a new one: the next call is scored
        assert [r.reason for r in pool.score_many([ScoreRequest([r"\boxed{2}"], "2", "math")])[0]] == ["correct"]
    finally:
        pool.shutdown()


def test_a_call_waiting_behind_another_is_timed_from_its_own_start(ray_local):
    # two 1.8 s calls on one worker: the second returns ~3.6 s after it was sent, past its 3 s limit, but it ran
    # 1.8 s: a call queued behind others (every generation actor shares the workers) is not given up
    pool = StallingPool(num_workers=1, cfg=FAST_LIMITS)
    try:
        with ThreadPoolExecutor(2) as threads:
            calls = [threads.submit(pool.score_many, [ScoreRequest([r"\boxed{3}"], NAP, "math")]) for _ in range(2)]
            assert [[r.reason for r in c.result(timeout=60)[0]] for c in calls] == [["wrong"], ["wrong"]]
        assert sum(s["groups_scored"] for s in pool.stats()) == 2        # neither killed and run again
    finally:
        pool.shutdown()


def test_a_group_whose_sandbox_cannot_start_comes_back_as_its_own_exception(ray_local):
    """SandboxUnavailable travels from the worker as that group's entry; the math group beside it is scored."""
    pool = NoLauncherPool(num_workers=1, cfg=CFG)
    try:
        program = "```python\ndef f(x):\n    return x * x\n```"
        out = pool.score_many([ScoreRequest([r"\boxed{5}"], "5", "math"), ScoreRequest([program], SQUARE, "mbpp")])
        assert [r.reason for r in out[0]] == ["correct"]
        assert isinstance(out[1], SandboxUnavailable) and out[1].reason == "sandbox_unavailable", out[1]
        assert "launcher could not start" in str(out[1])
    finally:
        pool.shutdown()


def test_a_pool_for_code_checks_its_sandbox_first_and_refuses_missing_walls(ray_local):
    """With code problems, every worker runs a trivial program before any real one: the walls it had are the
    pool's code_isolation; a strict config on a host without them (here: namespaces turned off) refuses to
    start, naming what is missing and the flag, and its workers are gone; 'weak' accepts and records it."""
    from rewards.code_isolation import SandboxRefused

    walled = RewardPool(num_workers=1, cfg=CFG, code=True)
    try:
        assert {"net", "mount", "rootfs", "pid", "ipc", "seccomp"} <= set(walled.code_isolation)
        assert pickle.loads(pickle.dumps(walled)).code_isolation == walled.code_isolation
    finally:
        walled.shutdown()
    bare = CFG.model_copy(update={"code_use_namespaces": False})
    with pytest.raises(SandboxRefused, match=r"^error: the code sandbox on this host lacks net, mount, rootfs, pid, ipc"
                                             r".*--rewards\.code_isolation weak"):
        RewardPool(num_workers=1, cfg=bare, code=True)
    weak = RewardPool(num_workers=1, cfg=bare.model_copy(update={"code_isolation": "weak"}), code=True)
    try:
        assert not {"net", "mount", "pid"} & set(weak.code_isolation)
    finally:
        weak.shutdown()
