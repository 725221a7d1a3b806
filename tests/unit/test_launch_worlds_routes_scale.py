"""`--routes`: every preset scales to the routes world keeping what its ablation is about, with the
paper's budgets times 3/512, one learning rate for all, and the world recorded in the config."""

from __future__ import annotations

import pytest

from launch.run.compose import build_config
from launch.config import RunConfig
from launch.config.presets import PRESETS, get_preset
from launch.experiments.science.runner import RunSpec
from launch.worlds.routes import MAX_MODEL_LEN, STAGE_BUDGETS
from launch.worlds.routes.scale import ROUTES_LR, scale_to_routes, scaled_tokens

SKYWORK = [n for n in PRESETS if not n.startswith("skyt1")]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_scales_and_round_trips(name):
    cfg = scale_to_routes(get_preset(name))
    assert cfg.world == "routes"
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert cfg.actors.max_model_len == MAX_MODEL_LEN >= cfg.data.max_response_tokens + 48
    if cfg.learner.prime is None:
        assert cfg.learner.lr == ROUTES_LR                                   # one lr for every arm


@pytest.mark.parametrize("name", SKYWORK)
def test_keeps_what_the_ablation_is_about(name):
    big, small = get_preset(name), scale_to_routes(get_preset(name))
    b, s = big.learner.batch, small.learner.batch
    assert (s.n_reuse, s.n_sgd) == (b.n_reuse, b.n_sgd)
    assert s.rollout_batch // s.mini_batch == b.rollout_batch // b.mini_batch
    assert s.rollout_batch == 16 and small.group_size == 8
    assert (small.temperature, small.learner.lag) == (big.temperature, big.learner.lag)
    assert small.learner.loss == big.learner.loss
    assert small.learner.entropy == big.learner.entropy
    assert small.learner.advantage.truncation_mask == big.learner.advantage.truncation_mask


def test_budgets_are_the_papers_times_3_over_512():
    # 8192 * 3 // 512 = 48, 16384 -> 96, 32768 -> 192; 4096 (DAPO's L_cache) -> 24; 100 -> 0 -> the floor
    assert [scaled_tokens(t) for t in (8192, 16384, 32768, 4096, 100)] == [48, 96, 192, 24, 0]
    assert [s.max_tokens for s in scale_to_routes(get_preset("baseline")).data.stages] == [96]
    stages = scale_to_routes(get_preset("multistage")).data.stages
    assert [(s.max_tokens, s.steps) for s in stages] == list(zip(STAGE_BUDGETS, (10, 10, None)))
    assert scale_to_routes(get_preset("multistage")).data.online_filter


def test_overlong_shaping_scales_with_the_budget():
    cfg = get_preset("multistage")
    cfg.learner.advantage.overlong_cache = 4096                               # DAPO's L_cache at 8K..32K
    assert scale_to_routes(cfg).learner.advantage.overlong_cache == 24
    assert scale_to_routes(get_preset("baseline")).learner.advantage.overlong_cache is None


def test_cli_flag_and_worlds_exclusive():
    cfg, _ = build_config(["--routes", "--steps", "3", "--run_id", "r"], default_preset="offpolicy_reuse4")
    assert cfg.world == "routes" and cfg.steps == 3 and cfg.learner.batch.n_sgd == 16
    assert build_config(["--world", "routes", "--steps", "3", "--run_id", "r"],
                        default_preset="offpolicy_reuse4")[0] == cfg
    assert scale_to_routes(get_preset("onpolicy").model_copy(update={"steps": 500})).steps == 100   # at most 100
    with pytest.raises(SystemExit):
        build_config(["--routes", "--reasoning"], default_preset="onpolicy")


def test_science_runs_ask_for_the_world_by_its_flag(tmp_path):
    argv = RunSpec("fixedlag_2", (), "routes", 0, 3).argv(tmp_path)
    cfg, _ = build_config(argv, default_preset="onpolicy")
    assert cfg.world == "routes" and cfg.steps == 3 and cfg.learner.fixed_lag == 2


@pytest.mark.parametrize("name", ["onpolicy", "offpolicy_reuse4"])
def test_slips_is_the_routes_scaling_in_the_slips_world(name):
    from launch.worlds.routes.scale import scale_to_slips

    cfg, _ = build_config(["--preset", name, "--slips"], default_preset=name)
    assert cfg.world == "slips"
    assert cfg.model_dump(exclude={"world"}) == scale_to_routes(get_preset(name)).model_dump(exclude={"world"})
    assert scale_to_slips(get_preset(name)) == cfg
