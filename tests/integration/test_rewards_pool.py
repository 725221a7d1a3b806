"""RewardPool on a local Ray: groups are scored in parallel and equal the in-process scorer's results."""

from __future__ import annotations

import json
import pickle

import pytest
import ray

from rewards.config import RewardConfig
from rewards.result import ScoreRequest
from rewards.scoring import score_group
from rewards.workers import RewardPool

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
