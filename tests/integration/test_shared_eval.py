"""launch.run.shared_eval on a real Ray: the report's shelf serves every arm of a report, however many
(each run asks the named, detached shelf; none may hold one of its call slots), computes a key's step-0
row once and leaves the others to compute their own."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration


def test_the_shelf_serves_every_arm_of_a_large_report(ray_local, monkeypatch):
    import ray

    from launch.run.shared_eval import NAMESPACE, SHARED_EVAL_ENV, first_evaluation

    report = f"lagrl-report-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(SHARED_EVAL_ENV, report)
    computed = []

    def compute(value):
        def measure():
            computed.append(value)
            return {"eval/avg@n": value}
        return measure

    try:
        rows = [first_evaluation(compute(0.5), "weights-a") for _ in range(8)]     # 8 arms, more than its slots
        assert computed == [0.5] and rows[0] == {"eval/avg@n": 0.5}
        assert all(row == {"eval/avg@n": 0.5, "eval/shared": 1.0} for row in rows[1:])
        assert first_evaluation(compute(0.25), "weights-b") == {"eval/avg@n": 0.25}   # another key: its own
        assert computed == [0.5, 0.25]
    finally:
        ray.kill(ray.get_actor(report, namespace=NAMESPACE))
