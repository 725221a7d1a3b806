"""One factor per comparison: the resolved configs of a finding's arms, in the finding's own world and with
the report's shared overrides, differ from their reference arm in the fields the comparison is about only."""

from __future__ import annotations

from dataclasses import replace

from launch.experiments.science.__main__ import fair_overrides
from launch.experiments.science.findings import finding
from launch.experiments.science.runner import config_of, spec_for


def _configs(key: str) -> dict[str, dict]:
    f = finding(key)
    f = replace(f, overrides=fair_overrides([f], f.world, 20)[key])
    return {arm.name: config_of(spec_for(f, arm, 0, 20, f.world)).model_dump(mode="json") for arm in f.arms}


def _differ(a: dict, b: dict, prefix: str = "") -> set[str]:
    """Dotted paths of the leaves where two dumped configs differ (the preset's name and the run's paths aside)."""
    out = set()
    for key in a.keys() | b.keys():
        path = prefix + key
        if path in ("preset", "run_id", "run_dir"):
            continue
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out |= _differ(x, y, path + ".")
        elif x != y:
            out.add(path)
    return out


def test_the_updates_per_batch_arms_differ_in_the_batch_and_synchronous_lag_only():
    cfgs = _configs("reuse")
    base = cfgs.pop("on-policy (1, D, D)")
    n_sgd = {}
    for name, cfg in cfgs.items():
        assert _differ(base, cfg) <= {"learner.lag.kind", "learner.batch.mini_batch", "learner.batch.n_reuse"}, name
        assert cfg["learner"]["lag"] == {"kind": "sync"} and cfg["learner"]["loss"]["eps_high"] == 0.2
        b = cfg["learner"]["batch"]
        n_sgd[name] = b["rollout_batch"] // b["mini_batch"] * b["n_reuse"]
    assert n_sgd == {"mini-batches (1, D, D/4)": 4, "reuse (4, D, D)": 4, "reuse and mini-batches (4, D, D/4)": 16}
    assert base["data"]["final_eval_n"] == 16 and base["learner"]["warmup_steps"] == 0


def test_the_decoupled_doses_differ_from_plain_ppo_in_the_objective_only():
    cfgs = _configs("lag")
    for k in (0, 1, 2, 4, 8):
        assert _differ(cfgs[f"lag {k}"], cfgs[f"lag {k}, decoupled"]) == {
            "learner.old_logprobs", "learner.loss.correction.type", "learner.loss.correction.cap"}   # cap: its default
        assert cfgs[f"lag {k}, decoupled"]["learner"]["lag"] == {"kind": "fixed", "k": k}


def test_the_multistage_control_is_the_final_budget_from_step_0():
    cfgs = _configs("multistage")
    fixed, staged = cfgs["fixed final budget"], cfgs["64 -> 128 -> 256"]
    assert _differ(fixed, staged) == {"data.stages"}
    assert [s["max_tokens"] for s in staged["data"]["stages"]] == [64, 128, 256]
    assert [s["max_tokens"] for s in fixed["data"]["stages"]] == [256]


def test_the_temperature_arms_differ_in_the_sampling_temperature_only_and_evaluate_at_1():
    cfgs = _configs("temperature")
    for pair in (("tau 1.0", "tau 0.6"), ("tau 1.0, adaptive", "tau 0.6, adaptive")):
        assert _differ(cfgs[pair[0]], cfgs[pair[1]]) == {"temperature"}
    assert {c["data"]["eval_temperature"] for c in cfgs.values()} == {1.0}
    assert {c["learner"]["entropy"]["type"] for c in (cfgs["tau 1.0"], cfgs["tau 0.6"])} == {"none"}


def test_clip_higher_under_reuse_shares_its_symmetric_arm_and_differs_in_eps_high_only():
    """clip_higher_reuse's eps_high 0.2 arm is entropy_control_reuse's adaptive arm (one set of runs: the
    same spec key, so a report with both runs it once); its 0.28 arm differs in eps_high alone."""
    ch, ec = finding("clip_higher_reuse"), finding("entropy_control_reuse")
    assert spec_for(ch, ch.arms[0], 3, 20, "slips").key == spec_for(ec, ec.arms[0], 3, 20, "slips").key
    low, high = _configs("clip_higher_reuse").values()
    assert _differ(low, high) == {"learner.loss.eps_high"}
    assert (low["preset"], low["run_dir"]) == (high["preset"], high["run_dir"])   # _differ skips these; the move kept them
    assert (low["learner"]["loss"]["eps_high"], high["learner"]["loss"]["eps_high"]) == (0.2, 0.28)
    assert low["steps"] == 40 and low["learner"]["batch"]["n_reuse"] == 4
