"""launch.run.probe: which responses the probe reads and how its mean weighs them, and what it asks of the
evaluator and the learner (sampled at temperature 1 with its own seeds; entropies at 1 and at the run's τ)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from launch.run.probe import PROBE_SEED, PROBE_TEMPERATURE, measure_probe, probe_rows, token_mean


def _response(tokens, version=3):
    return SimpleNamespace(token_ids=np.asarray(tokens, np.int32), version_start=version, version_end=version)


def _group(prompt, *responses):
    return SimpleNamespace(prompt_ids=np.asarray(prompt, np.int32), responses=list(responses))


def test_every_nonempty_response_is_a_row_nothing_trained():
    groups = [_group([1, 2], _response([5, 6, 7]), _response([])), _group([3], _response([8]))]
    rows = probe_rows(groups)
    assert [r.response_ids.tolist() for r in rows] == [[5, 6, 7], [8]]
    assert [r.group_index for r in rows] == [0, 1] and all(r.advantage == 0.0 for r in rows)
    assert rows[0].prompt_ids.tolist() == [1, 2] and rows[0].old_logprobs.shape == (3,)


def test_the_mean_is_over_tokens():
    # two responses: 3 tokens of entropy 1.0, 1 token of 0.2 -> (3 + 0.2) / 4, not (1.0 + 0.2) / 2
    assert token_mean([np.ones(3), np.array([0.2])]) == pytest.approx(0.8)
    assert np.isnan(token_mean([]))


class _Evaluator:
    def __init__(self, temperature: float):
        self.calls = []
        self.probe_problems, self.probe_n, self.temperature = ["p"], 2, temperature

    def sample(self, problems, **kwargs):
        self.calls.append(kwargs)
        return [_group([1], _response([4, 5]), _response([6]))]


class _Learner:
    version = 7

    def __init__(self):
        self.temperatures = []

    def token_entropies(self, rows, temperature):
        self.temperatures.append(temperature)
        return [np.full(len(r.response_ids), 0.5 * temperature) for r in rows]


@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_sampled_at_temperature_one_with_its_seeds_and_measured_at_both(tau):
    evaluator, learner = _Evaluator(tau), _Learner()
    row = measure_probe(evaluator, learner, step=4, max_tokens=16)
    (call,) = evaluator.calls
    assert call == {"n": 2, "temperature": PROBE_TEMPERATURE, "version": 7, "step": 4, "max_tokens": 16,
                    "kind": "probe", "seed": PROBE_SEED}
    assert row["probe/entropy"] == pytest.approx(0.5) and row["probe/entropy_sampling_tau"] == pytest.approx(0.5 * tau)
    assert row["probe/tokens"] == 3 and row["probe/responses"] == 2 and row["probe/problems"] == 1
    assert learner.temperatures == ([1.0] if tau == 1.0 else [1.0, tau])     # one forward where the two agree
