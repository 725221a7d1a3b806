"""The reasoning world: built deterministically, its warmed-up policy in the band RL needs (10-50%
accurate at τ=1, some responses cut by a 64-token budget), and the driver runs on it through the
first stage boundary of a multi-stage schedule with real Ray, vLLM, Redis, DeepSpeed and math-verify.
All are slow (a quick build pair takes ~28 s, the others need the built world); the stage boundary in the tiny world runs by default
(tests/integration/test_stages.py)."""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import metrics_rows

pytestmark = pytest.mark.integration


@pytest.mark.slow   # ~28 s; the routes world (the entropy findings' world) keeps its determinism check by default
def test_build_is_deterministic(tmp_path):
    from launch.worlds.reasoning.build import ensure_reasoning_world

    # A 3-step warm-up measured on 16 problems keeps this fast; determinism does not depend on either.
    quick = dict(max_warmup_steps=3, n_val=16, log=lambda *_: None)
    a = ensure_reasoning_world(seed=3, cache_dir=tmp_path / "a", **quick)
    b = ensure_reasoning_world(seed=3, cache_dir=tmp_path / "b", **quick)
    assert a.manifest["sha256"] == b.manifest["sha256"]
    assert set(a.manifest["sha256"]) == {"model/tokenizer.json", "model/model.safetensors",
                                         "data/train.jsonl", "data/val.jsonl"}
    assert a.manifest["sampled"] == b.manifest["sampled"]          # the sampled figures too


@pytest.mark.slow   # two more quick builds: what the seed changes, not what the default run must prove
def test_another_seed_builds_another_world(tmp_path):
    from launch.worlds.reasoning.build import ensure_reasoning_world

    quick = dict(max_warmup_steps=3, n_val=16, log=lambda *_: None)
    a = ensure_reasoning_world(seed=3, cache_dir=tmp_path / "a", **quick)
    c = ensure_reasoning_world(seed=4, cache_dir=tmp_path / "c", **quick)
    assert c.manifest["sha256"]["model/model.safetensors"] != a.manifest["sha256"]["model/model.safetensors"]
    assert c.manifest["sha256"]["data/val.jsonl"] != a.manifest["sha256"]["data/val.jsonl"]


@pytest.mark.slow   # the reasoning world's build: ~4-6 min in a fresh clone on 2 cores
def test_warmed_up_policy_is_in_the_band_rl_needs(reasoning_world):
    m = reasoning_world.manifest
    at_1 = m["sampled"]["tau_1.0"]
    assert 0.10 <= at_1["accuracy"] <= 0.50, at_1
    cut = {int(k): v for k, v in at_1["cut_at"].items()}
    assert cut[64] > 0.2 and cut[64] > cut[128] >= cut[256], cut    # the 64-token stage bites, 256 hardly
    assert m["gold_response_tokens"]["max"] <= 256 and m["gold_response_tokens"]["min"] <= 20
    assert m["n_params"] > 1_000_000 and m["build_seconds"] > 0


@pytest.mark.slow   # the reasoning world's build: ~4-6 min in a fresh clone on 2 cores
def test_driver_runs_two_steps_across_a_stage_boundary(ray_local, tmp_path, reasoning_world):
    from launch.run.compose import build_config
    from launch.run.driver import run

    stages = json.dumps([{"max_tokens": 64, "steps": 1}, {"max_tokens": 128}])
    cfg, _ = build_config(["--reasoning", "--steps", "2", "--data.stages", stages, "--data.eval_max_problems", "8",
                           "--run_dir", str(tmp_path / "runs"), "--run_id", "reasoning-2"], default_preset="multistage")
    assert cfg.world == "reasoning" and cfg.learner.batch.rollout_batch == 16 and cfg.group_size == 8
    result = run(cfg)
    rows = metrics_rows(result.run_path)
    assert [r["stage"] for r in rows] == [0.0, 1.0]
    assert rows[0]["length/max"] <= 64 and rows[0]["truncation/rate"] > 0      # the 64-token stage cuts
    assert rows[1]["length/max"] <= 128
    assert all(0.0 <= r["reward/accuracy"] <= 1.0 for r in rows)
    assert len(result.evals) == 2 and all(e["eval/problems"] == 8 for e in result.evals)
