"""The code world: built deterministically, its warmed-up policy sometimes right on both kinds, and a
mixed math+code run (preset mixed_math_code) end to end with real Ray, vLLM, Redis, DeepSpeed,
math-verify and the sandbox behind the Ray reward pool: code rewards arrive in the groups, they are
not all zero, math ones arrive beside them, and the buffer's books balance."""

from __future__ import annotations

import json

import pytest

from rewards.result import CODE_REASONS, MATH_REASONS

pytestmark = pytest.mark.integration

RUN_ID = "code-mixed-3"


def test_build_is_deterministic(tmp_path):
    from launch.worlds.code.build import ensure_code_world

    quick = dict(max_warmup_steps=2, log=lambda *_: None)
    a = ensure_code_world(seed=3, cache_dir=tmp_path / "a", **quick)
    b = ensure_code_world(seed=3, cache_dir=tmp_path / "b", **quick)
    assert a.manifest["sha256"] == b.manifest["sha256"] and a.manifest["sampled"] == b.manifest["sampled"]
    assert set(a.manifest["sha256"]) == {"model/tokenizer.json", "model/model.safetensors", "data/train.jsonl",
                                         "data/val.jsonl"}


def test_warmed_up_policy_sometimes_solves_both_kinds(code_world):
    from rewards.problems import load_problem_set

    m = code_world.manifest
    assert 0.05 <= m["sampled"]["math"] <= 0.9 and 0.05 <= m["sampled"]["code"] <= 0.95, m["sampled"]
    train = load_problem_set(code_world.train_path)
    assert train.format == "verl" and not train.rejected
    sources = [p.data_source for p in train.problems]
    assert sources.count("code_oneliner") == sources.count("arith") == m["n_train"] // 2
    assert m["longest_prompt_plus_answer"] + 4 <= 128                  # fits MAX_MODEL_LEN with room


@pytest.mark.slow     # 55-100 s: out of the default run (~25 min), run with -m slow
def test_mixed_math_code_run_through_the_reward_pool(ray_local, code_world, tmp_path):
    from buffer import connect
    from buffer.audit import audit
    from buffer.monitor import Monitor
    from buffer.server import open_run_dir
    from launch.run.compose import build_config
    from launch.run.driver import run

    cfg, _ = build_config(["--code", "--steps", "3", "--tracking", "none", "--data.eval_max_problems", "40",
                           "--run_dir", str(tmp_path / "runs"), "--run_id", RUN_ID], "mixed_math_code")
    assert cfg.world == "code" and cfg.rewards.code_all_or_nothing and cfg.data.chat_template and cfg.rewards.num_workers == 2
    result = run(cfg)
    rows = [json.loads(line) for line in (result.run_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["groups/trained"] > 0 for r in rows), rows
    # the walls the code rewards ran with, checked before any program ran (rewards.code_isolation), recorded
    summary = json.loads((result.run_path / "summary.json").read_text())
    assert set(summary["code_isolation"]) >= {"net", "mount", "rootfs", "pid", "ipc", "seccomp"}, summary

    with open_run_dir(result.run_path) as server:
        client = connect(server.url, wait_s=10)
        try:
            books = audit(client, RUN_ID)
        finally:
            client.close()
        groups = Monitor(server.url, RUN_ID).recent_groups(count=10_000)
    print(f"[audit {RUN_ID}] {books.line()}", flush=True)
    assert books.balanced and books.outcomes["trained"] > 0, books.as_dict()

    code = [g for g in groups if g["data_source"] == "code_oneliner"]
    math = [g for g in groups if g["data_source"] == "arith"]
    assert code and math, {g["data_source"] for g in groups}
    code_responses = [r for g in code for r in g["responses"]]
    reasons = {r["reward_info"]["reason"] for r in code_responses}
    assert reasons <= CODE_REASONS and reasons - MATH_REASONS or "correct" in reasons, reasons
    rewards = [r["reward"] for r in code_responses]
    assert any(x == 1.0 for x in rewards) and set(rewards) <= {0.0, 1.0}, rewards   # all-or-nothing, not all 0
    solved = [r for r in code_responses if r["reward_info"]["reason"] == "correct"]
    assert all(("return" in r["reward_info"]["extracted"] or "print(" in r["reward_info"]["extracted"]) for r in solved)
    assert {r["reward_info"]["reason"] for g in math for r in g["responses"]} <= MATH_REASONS
    # the prompts went through the chat template with the code problems' system message kept
    rendered = [g["prompt"] for g in code]
    assert all(p.startswith("# python\nQ: ") and p.endswith("\nA: ") for p in rendered), rendered[0]
    evals = result.evals
    assert {"eval/code_oneliner/avg@n", "eval/arith/avg@n"} <= set(evals[-1]), evals[-1]
