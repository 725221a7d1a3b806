"""The lag guard in real runs (tiny world; Ray, vLLM, Redis, DeepSpeed), offpolicy_guarded:

- with only an entropy floor just below the starting entropy, reuse-4's falling entropy trips it: the
  run falls back to strict on-policy and trains those steps at lag 0 with one update each;
- with only the clip rule, at an absolute 2% (reuse-4 clips 4-6% of its tokens here, strict
  on-policy none), it falls back, returns to off-policy once the rule has been quiet, and falls back
  again. The return is shown with the clip rule because the clip fraction separates the two modes on
  every step; an entropy floor does not (on-policy training lowers entropy too, so its entropy hovers
  around a floor set near the start and a return passed or failed by chance).

Every switch is an event in the metrics stream and the summary; the books balance (the groups sampled
beyond the new lag bound are dropped as stale, not trained, not lost). The rules' thresholds are
unit-tested by hand (tests/unit/test_learner_guard.py).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import metrics_rows

pytestmark = pytest.mark.integration


def _guarded_run(tmp_path, run_id: str, steps: int, rule_args: list[str]):
    from launch.run.compose import build_config
    from launch.run.driver import run

    off = {"--learner.guard.entropy_floor_start_frac": "null", "--learner.guard.entropy_floor_target_frac": "null",
           "--learner.guard.slope_max_drop_frac": "null", "--learner.guard.mismatch_kl_max": "null",
           "--learner.guard.clip_frac_max": "null"}
    for key in rule_args[::2]:
        off.pop(key, None)
    cfg, _ = build_config(["--tiny", "--steps", str(steps), "--run_dir", str(tmp_path / "runs"), "--run_id", run_id,
                           "--data.eval_every", "0", "--data.eval_max_problems", "16",
                           *[x for kv in off.items() for x in kv], *rule_args,
                           "--learner.guard.persist_steps", "1"], default_preset="offpolicy_guarded")
    result = run(cfg)
    rows = metrics_rows(result.run_path)
    events = [r["guard/event"] for r in rows if "guard/event" in r]
    print(" | ".join(e["message"] for e in events))
    return cfg, result, rows, events


def _assert_declared_modes(rows: list[dict], events: list[dict]) -> None:
    """Declared on-policy steps: one update, every token lag 0; a switch takes effect at the next step."""
    for r in rows:
        if r["mode"] == "on_policy":
            assert r["updates"] == 1 and r["lag/max"] == 0 and r["guard/on_policy"] == 1.0, r["step"]
        else:
            assert r["updates"] == 16 and r["guard/on_policy"] == 0.0
    by_step = {r["step"]: r for r in rows}
    for e in events:
        if e["step"] + 1 in by_step:
            assert by_step[e["step"] + 1]["mode"] == e["to_mode"]


@pytest.mark.slow   # ~40 s; the default run keeps the clip rule's real fallback and return (below)
def test_entropy_floor_just_below_the_start_falls_back_to_on_policy(ray_local, tmp_path, tiny_world):
    _, _, rows, events = _guarded_run(tmp_path, "floor", 8, [
        "--learner.guard.entropy_floor_start_frac", "0.97", "--learner.guard.start_steps", "2",
        "--learner.guard.hold_steps", "20"])
    print("[entropy] " + " ".join(f"{r['step']}{r['mode'][:3]}:{r['entropy/mean']:.3f}" for r in rows))
    assert events and events[0]["kind"] == "fallback", events
    fallback = events[0]
    assert fallback["rules"] == ["entropy_floor"] and fallback["values"]["entropy/mean"] < \
        0.97 * fallback["values"]["entropy/start"], fallback
    _assert_declared_modes(rows, events)
    assert [r["mode"] for r in rows if r["step"] > fallback["step"]] == \
        ["on_policy"] * sum(r["step"] > fallback["step"] for r in rows)          # held: hold_steps 20


@pytest.mark.slow     # 55-100 s: out of the default run (~25 min), run with -m slow
def test_clip_rule_falls_back_to_on_policy_and_returns(ray_local, tmp_path, tiny_world):
    from buffer.audit import audit
    from buffer.connection import connect
    from buffer.server import open_run_dir

    # reuse-4 clips 4-6% of its tokens on every off-policy step here, so with persist 1 and hold 2 it falls
    # back at step 0, returns after step 2 and falls back at step 3: 8 steps leave room for both
    cfg, result, rows, events = _guarded_run(tmp_path, "guarded", 8, [
        "--learner.guard.clip_frac_max", "0.02", "--learner.guard.clip_frac_growth", "null",
        "--learner.guard.hold_steps", "2", "--learner.guard.recover_quiet_steps", "1"])
    print("[clip] " + " ".join(f"{r['step']}{r['mode'][:3]}:{r['clip/frac']:.3f}" for r in rows))
    kinds = [e["kind"] for e in events]
    assert "fallback" in kinds and "recover" in kinds[kinds.index("fallback"):], kinds
    fallback = events[kinds.index("fallback")]
    assert fallback["rules"] == ["clip_frac"] and fallback["values"]["clip/frac"] > 0.02, fallback
    _assert_declared_modes(rows, events)
    by_step = {r["step"]: r for r in rows}

    summary = json.loads((result.run_path / "summary.json").read_text())
    assert summary["guard"]["fallbacks"] == kinds.count("fallback") >= 1
    assert summary["guard"]["recoveries"] == kinds.count("recover") >= 1
    # the on-policy steps follow from the events alone: from the step after a fallback to the recovery
    declared, mode = set(), "off_policy"
    for step in sorted(by_step):
        if mode == "on_policy":
            declared.add(step)
        mode = next((e["to_mode"] for e in events if e["step"] == step), mode)
    assert {r["step"] for r in rows if r["mode"] == "on_policy"} == declared
    assert summary["guard"]["on_policy_steps"] == len(declared) >= 2

    with open_run_dir(result.run_path) as server:
        client = connect(server.url)
        books = audit(client, cfg.run_id)
        client.close()
    print(f"[audit] {books.line()}")
    assert books.balanced and books.prompts_lost == 0 and books.groups_lost == 0 and books.duplicates == 0
    assert books.outcomes["stale"] > 0         # sampled off-policy, dropped in the on-policy steps
