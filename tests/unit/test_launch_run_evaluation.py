"""Held-out evaluation: pass@k by hand from what the actors return, and the run's final evaluation sampling
``data.final_eval_n`` per problem while every other evaluation samples ``data.eval_n``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launch.config import DataConfig
from launch.run import driver
from launch.run.evaluation import Evaluator


def _group(correct: int, n: int):
    responses = [SimpleNamespace(reward_info={"reason": "correct" if i < correct else "wrong"}, version_start=5)
                 for i in range(n)]
    return SimpleNamespace(responses=responses, data_source="s")


def _evaluator(correct_per_problem: list[int], n: int = 4) -> Evaluator:
    """An evaluator whose actors answer problem i with ``correct_per_problem[i]`` correct of the n asked."""
    evaluator = Evaluator.__new__(Evaluator)
    evaluator.problems, evaluator.n, evaluator.temperature, evaluator.eval_temperature = ["p", "q"], n, 1.0, 1.0
    evaluator.asked, evaluator.asked_temperature = [], []

    def sample(problems, *, n, temperature, **_):
        evaluator.asked.append(n)
        evaluator.asked_temperature.append(temperature)
        return [_group(c, n) for c in correct_per_problem]

    evaluator.sample = sample
    return evaluator


def test_pass_at_16_when_the_evaluation_samples_16():
    # problem p: 1 correct of 16, q: none. pass@1 = (1/16 + 0) / 2; pass@2 for p = 1 - C(15,2)/C(16,2) = 1 - 105/120;
    # pass@8 for p = 1 - C(15,8)/C(16,8) = 1 - 6435/12870 = 0.5; pass@16 for p = 1 (it holds the correct one)
    evaluator = _evaluator([1, 0])
    row = evaluator.evaluate(version=5, step=10, max_tokens=64, n=16)
    assert evaluator.asked == [16] and row["eval/n"] == 16
    assert row["eval/pass@1"] == pytest.approx(1 / 32) and row["eval/avg@n"] == pytest.approx(1 / 32)
    assert row["eval/pass@2"] == pytest.approx((1 - 105 / 120) / 2)
    assert row["eval/pass@8"] == pytest.approx(0.25) and row["eval/pass@16"] == pytest.approx(0.5)
    assert sorted(k for k in row if k.startswith("eval/pass@")) == [f"eval/pass@{k}" for k in (1, 16, 2, 4, 8)]


def test_without_n_the_evaluation_samples_eval_n():
    evaluator = _evaluator([1, 0], n=4)
    row = evaluator.evaluate(version=5, step=3, max_tokens=64)
    assert evaluator.asked == [4] and row["eval/n"] == 4 and "eval/pass@16" not in row
    assert row["eval/pass@4"] == pytest.approx(0.5)


def _run(evals: list[dict], *, steps_done: int = 10, steps: int = 10, eval_every: int = 5, final_eval_n: int = 16):
    """A driver whose ``_evaluate`` only records the samples it was asked for."""
    run = SimpleNamespace(evaluator=object(), result=SimpleNamespace(evals=evals, metrics=[]), asked=[],
                          learner=SimpleNamespace(steps_done=steps_done),
                          cfg=SimpleNamespace(steps=steps, data=DataConfig(eval_n=4, eval_every=eval_every,
                                                                           final_eval_n=final_eval_n)))
    run._evaluate = lambda n=None: run.asked.append(n)
    return run


@pytest.mark.parametrize("evals, final_eval_n, asked", [
    ([{"step": 5, "eval/n": 4}], 16, [16]),                      # the last step's: the final evaluation, at 16
    ([{"step": 10, "eval/n": 4}], 16, [16]),                     # stopped just after an evaluation at eval_n
    ([{"step": 10, "eval/n": 16}], 16, []),                      # already evaluated at 16
    ([{"step": 10, "eval/n": 4}], 0, []),                        # final_eval_n 0 = eval_n: already evaluated
    ([], 0, [4]),
])
def test_the_final_evaluation_samples_final_eval_n(evals, final_eval_n, asked):
    run = _run(evals, final_eval_n=final_eval_n)
    driver._Run.last_evaluation(run)
    assert run.asked == asked


@pytest.mark.parametrize("steps_done, asked", [(5, [None]), (10, [])])
def test_the_periodic_evaluation_leaves_the_last_step_to_the_final_one(monkeypatch, tmp_path, steps_done, asked):
    monkeypatch.setattr(driver, "actors_tokens_per_s", lambda buffer: 0.0)
    run = _run([], steps_done=steps_done)
    run.stats, run.run_path, run.buffer = SimpleNamespace(update=lambda: None), tmp_path, None
    run.trackers = SimpleNamespace(log_metrics=lambda row: None)
    driver._Run._record_step(run, {"step": steps_done - 1}, SimpleNamespace(line=lambda *a: ""), None)
    assert run.asked == asked


def test_the_evaluation_samples_at_its_own_temperature_when_one_is_set(monkeypatch):
    """A run sampling at 0.6 evaluated at 1.0 (the temperature finding's common evaluation); unset, the run's."""
    monkeypatch.setattr("launch.run.evaluation.RunBuffer.from_url", lambda url, run_id: None)
    common = Evaluator("redis://127.0.0.1:1", "r", [], None, n=4, temperature=0.6, max_problems=2, eval_temperature=1.0)
    own = Evaluator("redis://127.0.0.1:1", "r", [], None, n=4, temperature=0.6, max_problems=2)
    assert (common.temperature, common.eval_temperature, own.eval_temperature) == (0.6, 1.0, 0.6)
    evaluator = _evaluator([1, 0])
    evaluator.temperature, evaluator.eval_temperature = 0.6, 1.0
    row = evaluator.evaluate(version=5, step=3, max_tokens=64)
    assert evaluator.asked_temperature == [1.0] and row["eval/temperature"] == 1.0
