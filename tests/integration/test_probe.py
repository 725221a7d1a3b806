"""The entropy probe (launch/run/probe.py) in two real tiny runs that sample at temperature 1.0 and 0.6: at
step 0 both measure the same initial weights on the same seeded probe prompts, so the probe's entropy
(temperature 1) is the same number in both, and does not depend on the sampling temperature, while the
entropy at each run's own temperature, and the learner-side ``entropy/mean``, do."""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import metrics_rows

pytestmark = pytest.mark.integration


def _run(tmp_path, temperature: float):
    from launch.run.compose import build_config
    from launch.run.driver import run

    cfg, _ = build_config(["--tiny", "--steps", "1", "--run_dir", str(tmp_path / "runs"),
                           "--run_id", f"probe-t{temperature:g}", "--temperature", str(temperature),
                           "--data.eval_every", "0", "--data.eval_max_problems", "4", "--data.eval_n", "1",
                           "--data.probe_problems", "8", "--data.probe_n", "2"], default_preset="onpolicy")
    result = run(cfg)
    evals = [json.loads(line) for line in (result.run_path / "evals.jsonl").read_text().splitlines()]
    return evals, metrics_rows(result.run_path)


def test_the_probe_measures_the_policy_not_the_sampling_temperature(ray_local, tmp_path, tiny_world):
    (hot, hot_steps), (cold, cold_steps) = _run(tmp_path, 1.0), _run(tmp_path, 0.6)
    assert [e["step"] for e in hot] == [0, 1] and [e["step"] for e in cold] == [0, 1]
    h0, c0 = hot[0], cold[0]
    assert h0["probe/responses"] == c0["probe/responses"] == 16 and h0["probe/problems"] == 8
    # the same weights, prompts and seeds: the same responses, the same entropy at temperature 1
    assert h0["probe/tokens"] == c0["probe/tokens"] > 16
    assert h0["probe/entropy"] == pytest.approx(c0["probe/entropy"], rel=1e-6) and h0["probe/entropy"] > 0
    # at each run's own temperature: the same number at 1.0, a sharper distribution at 0.6
    assert h0["probe/entropy_sampling_tau"] == h0["probe/entropy"]
    assert c0["probe/entropy_sampling_tau"] < 0.9 * c0["probe/entropy"]
    # the learner-side entropy is taken at the sampling temperature: lower at 0.6
    assert cold_steps[0]["entropy/mean"] < hot_steps[0]["entropy/mean"]
    assert all(e["probe/entropy"] > 0 for e in hot + cold)
