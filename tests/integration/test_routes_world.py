"""The routes world (issue 33, item 1): built deterministically; its warmed-up policy has entropy to
lose (>= 0.4 nats/token at τ=1, well above the adaptive control's 0.2 target), is right 20-50% of the
time, writes 20-200-token responses that grow with difficulty, takes routes that are not equally easy;
and the driver runs on it through a stage boundary with real Ray, vLLM, Redis, DeepSpeed and math-verify."""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import metrics_rows

pytestmark = pytest.mark.integration


def test_build_is_deterministic(tmp_path):
    from launch.worlds.routes.build import ensure_routes_world

    # A 3-step warm-up measured on 16 problems keeps this fast; determinism does not depend on either.
    quick = dict(max_warmup_steps=3, n_val=16, log=lambda *_: None)
    a = ensure_routes_world(seed=3, cache_dir=tmp_path / "a", **quick)
    b = ensure_routes_world(seed=3, cache_dir=tmp_path / "b", **quick)
    assert a.manifest["sha256"] == b.manifest["sha256"]
    assert set(a.manifest["sha256"]) == {"model/tokenizer.json", "model/model.safetensors",
                                         "data/train.jsonl", "data/val.jsonl"}
    assert a.manifest["sampled"] == b.manifest["sampled"]          # the sampled figures too


@pytest.mark.slow   # two more quick builds: what the seed changes, not what the default run must prove
def test_another_seed_builds_another_world(tmp_path):
    from launch.worlds.routes.build import ensure_routes_world

    quick = dict(max_warmup_steps=3, n_val=16, log=lambda *_: None)
    a = ensure_routes_world(seed=3, cache_dir=tmp_path / "a", **quick)
    c = ensure_routes_world(seed=4, cache_dir=tmp_path / "c", **quick)
    assert c.manifest["sha256"]["model/model.safetensors"] != a.manifest["sha256"]["model/model.safetensors"]
    assert c.manifest["sha256"]["data/val.jsonl"] != a.manifest["sha256"]["data/val.jsonl"]


@pytest.mark.slow
def test_built_world_has_entropy_to_lose(tmp_path, routes_world):
    """A fresh build into an empty cache (~3 min on 2 cores) is the cached world, and its figures meet item 1."""
    from launch.worlds.routes.build import ensure_routes_world

    fresh = ensure_routes_world(cache_dir=tmp_path)
    m = fresh.manifest
    assert m["sha256"] == routes_world.manifest["sha256"]                    # deterministic at full size too
    at_1, at_06 = m["sampled"]["tau_1.0"], m["sampled"]["tau_0.6"]
    assert at_1["mean_entropy"] >= 0.4 > 0.2, at_1["mean_entropy"]           # above the adaptive target
    assert at_06["mean_entropy"] < at_1["mean_entropy"]
    assert 0.20 <= at_1["accuracy"] <= 0.50, at_1["accuracy"]
    p50 = [q["p50"] for _, q in sorted(at_1["length_by_k"].items(), key=lambda kv: int(kv[0]))]
    assert p50 == sorted(p50) and p50[-1] >= 3 * p50[0], p50                 # longer with every k
    assert at_1["length_quantiles"]["p10"] >= 20 and at_1["length_quantiles"]["max"] <= 200
    cut = {int(b): v for b, v in at_1["cut_at"].items()}
    assert cut[48] > 0.2 and cut[48] > cut[96] and cut[192] <= 0.05, cut    # each larger budget cuts less
    # the routes are not equally easy to finish: RL has something to sharpen
    routes = {name: r["accuracy"] for name, r in at_1["routes"].items() if r["share"] >= 0.1}
    forms = {name: r["accuracy"] for name, r in at_1["forms"].items() if name != "other"}
    assert max(routes.values()) - min(routes.values()) >= 0.1 or max(forms.values()) - min(forms.values()) >= 0.05
    assert m["data"]["route_entropy_per_token"] > 0.3 and m["n_params"] > 1_000_000


@pytest.mark.slow
def test_driver_runs_two_steps_across_a_stage_boundary(ray_local, tmp_path, routes_world):
    from launch.run.compose import build_config
    from launch.run.driver import run

    stages = json.dumps([{"max_tokens": 48, "steps": 1}, {"max_tokens": 96}])
    cfg, _ = build_config(["--routes", "--steps", "2", "--data.stages", stages, "--data.eval_max_problems", "8",
                           "--run_dir", str(tmp_path / "runs"), "--run_id", "routes-2"], default_preset="multistage")
    assert cfg.world == "routes" and cfg.learner.batch.rollout_batch == 16 and cfg.group_size == 8
    result = run(cfg)
    rows = metrics_rows(result.run_path)
    assert [r["stage"] for r in rows] == [0.0, 1.0]
    assert rows[0]["length/max"] <= 48 and rows[0]["truncation/rate"] > 0.1     # the 48-token stage cuts
    assert rows[1]["length/max"] <= 96
    assert all(r["entropy/mean"] > 0.3 for r in rows)                           # the spread-out policy
    assert all(0.0 <= r["reward/accuracy"] <= 1.0 for r in rows)
    assert len(result.evals) == 2 and all(e["eval/problems"] == 8 for e in result.evals)


@pytest.mark.slow
def test_slips_world_has_entropy_that_the_reward_depends_on(tmp_path):
    """The slips world (~3 min to build on 2 cores) meets item 1's figures, and its policy learned the
    teacher's slips: a line after `,` comes out right far more often than after any rarer separator,
    and after no check word more often than after one, so the choices holding the entropy change the reward."""
    from launch.worlds.routes.build import ensure_slips_world

    fresh = ensure_slips_world(cache_dir=tmp_path)
    assert ensure_slips_world(log=lambda *_: None).manifest["sha256"] == fresh.manifest["sha256"]     # the cached one
    at_1, at_06 = fresh.manifest["sampled"]["tau_1.0"], fresh.manifest["sampled"]["tau_0.6"]
    assert at_1["mean_entropy"] >= 0.4 > at_06["mean_entropy"], at_1["mean_entropy"]
    assert 0.20 <= at_1["accuracy"] <= 0.50 < at_06["accuracy"], (at_1["accuracy"], at_06["accuracy"])
    p50 = [q["p50"] for _, q in sorted(at_1["length_by_k"].items(), key=lambda kv: int(kv[0]))]
    assert p50 == sorted(p50) and p50[-1] >= 2 * p50[0] and at_1["length_quantiles"]["p10"] >= 20, p50
    seps, checks = at_1["separators"], at_1["after_check"]
    assert all(seps[","]["accuracy"] >= r["accuracy"] + 0.15 for s, r in seps.items() if s != ","), seps
    assert all(checks[""]["accuracy"] >= r["accuracy"] + 0.1 for c, r in checks.items() if c), checks
