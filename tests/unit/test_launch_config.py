"""Run config: every preset round-trips through JSON, scales to the tiny world with the same ratios,
and overrides fail clearly on unknown keys and out-of-range values."""

from __future__ import annotations

import pytest

from launch.run.compose import build_config
from launch.config import RunConfig
from launch.config.overrides import ConfigError, apply_overrides, from_json, split_overrides, to_json
from launch.config.presets import PRESETS, get_preset
from launch.worlds.tiny.scale import scale_to_tiny


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_round_trips_through_json(name):
    for cfg in (get_preset(name), scale_to_tiny(get_preset(name))):
        back = from_json(RunConfig, to_json(cfg))
        assert back == cfg and to_json(back) == to_json(cfg)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_tiny_keeps_reuse_and_batch_ratio(name):
    big, tiny = get_preset(name), scale_to_tiny(get_preset(name))
    b, t = big.learner.batch, tiny.learner.batch
    assert tiny.world == "tiny" and t.n_reuse == b.n_reuse
    assert t.rollout_batch * b.mini_batch == b.rollout_batch * t.mini_batch
    assert t.n_sgd == b.n_sgd and tiny.temperature == big.temperature
    assert (tiny.learner.lag, tiny.learner.loss.eps_high) == (big.learner.lag, big.learner.loss.eps_high)
    assert tiny.group_size == big.group_size                               # rollouts per prompt are the recipe's
    assert (tiny.learner.prime is None) == (big.learner.prime is None)
    assert tiny.learner.advantage.estimator == big.learner.advantage.estimator


def test_paper_presets_hold_the_papers_numbers():
    on, off = get_preset("onpolicy"), get_preset("offpolicy_reuse4")
    assert (on.learner.mode, on.learner.batch.n_sgd, on.learner.loss.eps_low, on.learner.loss.eps_high) == \
        ("on_policy", 1, 0.2, 0.2)
    assert (on.temperature, on.group_size, on.data.stages[0].max_tokens) == (1.0, 16, 16384)
    b = off.learner.batch
    assert (b.n_reuse, b.rollout_batch, b.mini_batch) == (4, 64, 16)
    assert b.n_sgd == 16 and off.learner.loss.eps_high == 0.28
    assert get_preset("temp_0.6").temperature == 0.6


def test_skyt1_presets_hold_the_blogs_numbers():
    """Sky-T1-7B (NovaSky 2025): batch 256, PRIME with 4 rollouts and the all-right/all-wrong filter,
    RLOO with 8 rollouts and no filtering; lrs from PRIME's scripts (policy 5e-7, PRM 1e-6)."""
    prime, rloo = get_preset("skyt1_prime"), get_preset("skyt1_rloo")
    for cfg, gs in ((prime, 4), (rloo, 8)):
        b = cfg.learner.batch
        assert (b.rollout_batch, b.mini_batch, b.n_sgd, cfg.group_size) == (256, 256, 1, gs)
        assert cfg.learner.mode == "on_policy" and cfg.learner.lr == 5e-7 and cfg.learner.loss.kl_beta == 0
        assert cfg.learner.entropy.type == "none"
    p = prime.learner.prime
    assert (p.filter_low, p.filter_high, p.beta, p.prm_lr) == (0.2, 0.8, 0.05, 1e-6)
    # with 4 rollouts the band keeps accuracies 1/4 .. 3/4: exactly "not all right, not all wrong"
    assert [p.filter_low <= c / 4 <= p.filter_high for c in range(5)] == [False, True, True, True, False]
    a = rloo.learner.advantage
    assert rloo.learner.prime is None and a.estimator == "rloo"
    assert not rloo.learner.dynamic_sampling and not a.reject_zero_advantage      # no filtering
    tiny = scale_to_tiny(prime)
    assert tiny.learner.prime.prm_lr == 1e-4 and tiny.learner.lr == 1e-5      # measured (scale_to_tiny)
    assert scale_to_tiny(rloo).learner.lr == 2e-4 and scale_to_tiny(get_preset("onpolicy")).learner.lr == 5e-4


def test_overrides_apply_with_types():
    cfg = apply_overrides(get_preset("onpolicy"), split_overrides(
        ["--learner.lr", "2e-6", "--steps=7", "--actors.num_actors", "3", "--data.chat_template", "false"]))
    assert (cfg.learner.lr, cfg.steps, cfg.actors.num_actors, cfg.data.chat_template) == (2e-6, 7, 3, False)


def test_switching_a_tagged_member_starts_it_from_its_defaults():
    """The baseline's entropy rule is adaptive (target, delta, c_max ...); switching it to fixed or none
    must not carry those fields over into a member that has none of them, in either order."""
    base = get_preset("onpolicy")
    assert base.learner.entropy.type == "adaptive"
    for argv in (["--learner.entropy.type", "fixed", "--learner.entropy.coef", "1e-3"],
                 ["--learner.entropy.coef", "1e-3", "--learner.entropy.type", "fixed"]):
        cfg = apply_overrides(base, split_overrides(argv))
        assert cfg.learner.entropy.type == "fixed" and cfg.learner.entropy.coef == 1e-3
    assert apply_overrides(base, [("learner.entropy.type", "none")]).learner.entropy.type == "none"
    # the same tag keeps the member's other fields
    kept = apply_overrides(base, [("learner.entropy.delta", "0.005"), ("learner.entropy.type", "adaptive")])
    assert kept.learner.entropy.delta == 0.005 and kept.learner.entropy.c_max == base.learner.entropy.c_max
    with pytest.raises(ConfigError, match="coef"):          # a field the new member lacks is still an error
        apply_overrides(base, [("learner.entropy.type", "none"), ("learner.entropy.coef", "1e-3")])


def test_unknown_key_names_the_key_and_suggests():
    with pytest.raises(ConfigError, match=r"unknown config key --learner\.lrr.*did you mean --learner\.lr"):
        apply_overrides(get_preset("onpolicy"), [("learner.lrr", "1e-6")])


@pytest.mark.parametrize("key,value,path", [
    ("steps", "0", "--steps"),
    ("learner.lr", "-1", "--learner.lr"),
    ("actors.top_p", "1.5", "--actors.top_p"),
    ("run_id", "a:b", "--run_id"),
])
def test_out_of_range_value_names_the_field(key, value, path):
    with pytest.raises(ConfigError, match=rf"invalid config:\n  {path}"):
        apply_overrides(get_preset("onpolicy"), [(key, value)])


def test_cross_field_rule_is_checked_after_override():
    with pytest.raises(ConfigError, match="strict on-policy"):
        apply_overrides(get_preset("onpolicy"), [("learner.batch.n_reuse", "2")])
    with pytest.raises(ConfigError, match="overlong_cache=9000 exceeds the shortest stage budget 8192"):
        apply_overrides(get_preset("multistage"), [("learner.advantage.overlong_cache", "9000")])


def test_shared_settings_live_once():
    """Temperature, group size and response budgets are the run's: no component config repeats them."""
    from actors.config import ActorConfig
    from launch.config import DataConfig
    from learner.config import BatchConfig, PolicyLossConfig
    from learner.trainer_config import LearnerConfig

    for model in (ActorConfig, LearnerConfig, PolicyLossConfig, BatchConfig, DataConfig):
        assert not {"temperature", "group_size", "max_tokens", "max_response_tokens", "seed", "shuffle_seed"} \
            & set(model.model_fields)
    cfg = apply_overrides(get_preset("onpolicy"), [("temperature", "0.6"), ("group_size", "8")])
    assert (cfg.temperature, cfg.group_size) == (0.6, 8)


def test_stage_schedule():
    data = get_preset("multistage").data
    assert [data.stage_at(s) for s in (0, 99, 100, 199, 200, 10_000)] == \
        [(0, 8192), (0, 8192), (1, 16384), (1, 16384), (2, 32768), (2, 32768)]
    assert data.max_response_tokens == 32768


def test_evaluation_uses_the_current_stage_budget():
    from launch.config import DataConfig, StageConfig

    data = DataConfig(stages=[StageConfig(max_tokens=64, steps=3), StageConfig(max_tokens=128)])
    assert [data.eval_max_tokens(s) for s in (0, 2, 3, 10)] == [64, 64, 128, 128]   # raised after the change


def test_the_final_evaluation_samples_final_eval_n_else_eval_n():
    from launch.config import DataConfig

    assert DataConfig(eval_n=4).final_eval_samples == 4                       # 0: eval_n
    assert DataConfig(eval_n=4, final_eval_n=16).final_eval_samples == 16
    cfg = apply_overrides(get_preset("onpolicy"), [("data.eval_n", "2"), ("data.final_eval_n", "16")])
    assert (cfg.data.eval_n, cfg.data.final_eval_samples) == (2, 16)
    with pytest.raises(ConfigError, match="final_eval_n"):
        apply_overrides(cfg, [("data.final_eval_n", "-1")])


def test_cli_exits_2_with_the_message(capsys):
    with pytest.raises(SystemExit) as exc:
        build_config(["--tiny", "--learner.nope", "1"], default_preset="onpolicy")
    assert exc.value.code == 2 and "unknown config key --learner.nope" in capsys.readouterr().err
    cfg, print_only = build_config(["--tiny", "--print-config", "--steps", "3"], default_preset="offpolicy_reuse4")
    assert print_only and cfg.steps == 3 and cfg.preset == "offpolicy_reuse4" and cfg.world == "tiny"


def test_ablation_holds_the_learning_rate_equal(tmp_path, capsys):
    from launch.experiments.ablation import fair_specs

    specs, lr = fair_specs(["onpolicy", "offpolicy_reuse4"], tmp_path, tiny=True, steps=5, prefix="t", overrides=[])
    cfgs = [s.config(tmp_path) for s in specs]
    # the tiny world gives reuse-4 (16 updates per step) lr / 4: both arms get that one
    assert [c.learner.lr for c in cfgs] == [lr, lr] == [scale_to_tiny(get_preset("offpolicy_reuse4")).learner.lr] * 2
    assert [(c.run_id, c.steps, c.world) for c in cfgs] == [("t-onpolicy", 5, "tiny"), ("t-offpolicy_reuse4", 5, "tiny")]
    assert "one learning rate for every preset" in capsys.readouterr().out
    specs, lr2 = fair_specs(["onpolicy", "offpolicy_reuse4"], tmp_path, tiny=True, steps=5, prefix="t",
                            overrides=["--learner.lr", "3e-4"])
    assert lr2 == 3e-4 and {s.config(tmp_path).learner.lr for s in specs} == {3e-4}


def test_fixed_lag_presets_differ_from_the_baseline_only_in_the_lag():
    base = get_preset("baseline").learner
    for k in (0, 1, 2, 4, 8):
        cfg = get_preset(f"fixedlag_{k}")
        assert str(cfg.learner.lag) == f"fixed:{k}" and cfg.learner.versions_needed == k + 1
        assert (cfg.learner.mode, cfg.learner.max_lag, cfg.learner.fixed_lag) == \
            (("off_policy", k, k) if k else ("on_policy", 0, 0))
        differ = {f for f in type(base).model_fields if getattr(cfg.learner, f) != getattr(base, f)}
        assert differ == {"lag"}, differ
        assert scale_to_tiny(cfg).learner.lag == cfg.learner.lag


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_states_its_lag_once(name):
    cfg = get_preset(name)
    saved = cfg.learner.model_dump(mode="json")
    assert "lag" in saved and not {"mode", "max_lag", "fixed_lag"} & set(saved)
    b = cfg.learner.batch
    if name.startswith("fixedlag_"):
        want = f"fixed:{name.removeprefix('fixedlag_')}"
    elif name.startswith("cliphigh_"):
        want = "bounded:1"
    elif name.startswith("sync_"):
        want = "sync"
    elif name.startswith(("reuse", "offpolicy_")) and (b.n_sgd > 1 or cfg.learner.loss.eps_high != 0.2):
        want = f"bounded:{b.n_sgd}"
    else:
        want = "on_policy"
    assert str(cfg.learner.lag) == want


def test_fixed_lag_refuses_a_transport_that_serves_only_the_newest_version():
    from actors.transport import check_serves_versions, transport_for
    from actors.transport.object_store import RayObjectStoreTransport

    data = get_preset("fixedlag_2").model_dump()
    data["actors"]["weight_transport"] = "collective"
    with pytest.raises(ValueError, match="--actors.weight_transport ray"):
        RunConfig.model_validate(data)
    data["learner"] = get_preset("fixedlag_0").learner.model_dump()        # lag 0: the newest suffices
    assert RunConfig.model_validate(data).learner.fixed_lag == 0
    cfg = get_preset("fixedlag_2")
    with pytest.raises(ValueError, match="--actors.weight_transport ray"):
        transport_for(cfg.actors.model_copy(update={"weight_transport": "collective"}), "r", keep_versions=3)
    store = transport_for(cfg.actors.transport_or_default(), "r", keep_versions=cfg.learner.versions_needed)
    assert isinstance(store, RayObjectStoreTransport) and store.keep == 3
    assert store.location_for(1) == "ray://lagrl-weights-r/1"
    check_serves_versions(store, 3)
    with pytest.raises(ValueError, match="keep_versions=3"):
        check_serves_versions(RayObjectStoreTransport("r"), 3)                 # keeps 2
    with pytest.raises(ValueError, match="--actors.weight_transport ray"):
        check_serves_versions(object(), 2)                                     # no location_for
    check_serves_versions(object(), 1)                                         # the newest only: anything


@pytest.mark.parametrize("argv, lag", [
    (["--learner.lag", "fixed:4"], "fixed:4"),
    (["--learner.mode", "off_policy", "--learner.max_lag", "4"], "bounded:4"),        # the old keys, one release
    (["--learner.fixed_lag", "2", "--learner.mode", "off_policy", "--learner.max_lag", "2"], "fixed:2"),
    (["--learner.fixed_lag", "2"], "fixed:2"),
    (["--preset", "offpolicy_reuse4", "--learner.max_lag", "4"], "bounded:4"),
])
def test_the_lag_on_the_command_line_new_and_old(argv, lag):
    cfg, _ = build_config(["--tiny", *argv], default_preset="onpolicy")
    assert str(cfg.learner.lag) == lag


def test_old_lag_keys_that_contradict_name_the_new_setting():
    with pytest.raises(ConfigError, match=r"max_lag=4 beside lag on_policy: .*--learner.lag bounded:4"):
        apply_overrides(get_preset("onpolicy"), [("learner.max_lag", "4")])
    with pytest.raises(ConfigError, match=r"unknown config key --learner\.max_lagg"):     # a typo is still unknown
        apply_overrides(get_preset("onpolicy"), [("learner.max_lagg", "4")])
