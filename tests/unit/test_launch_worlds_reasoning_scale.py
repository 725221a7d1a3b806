"""`--reasoning`: every preset scales to the reasoning world keeping what its ablation is about, with
the paper's budgets divided by 128, one learning rate for all, and the world recorded in the config."""

from __future__ import annotations

import pytest

from launch.run.compose import build_config
from launch.config import RunConfig
from launch.config.presets import PRESETS, get_preset
from launch.experiments.science.runner import RunSpec
from launch.worlds.reasoning import MAX_MODEL_LEN
from launch.worlds.reasoning.scale import REASONING_LR, scale_to_reasoning

SKYWORK = [n for n in PRESETS if not n.startswith("skyt1")]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_scales_and_round_trips(name):
    cfg = scale_to_reasoning(get_preset(name))
    assert cfg.world == "reasoning"
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert cfg.learner.lr == REASONING_LR                                    # one lr for every arm
    assert cfg.actors.max_model_len == MAX_MODEL_LEN >= cfg.data.max_response_tokens + 96


@pytest.mark.parametrize("name", SKYWORK)
def test_keeps_what_the_ablation_is_about(name):
    big, small = get_preset(name), scale_to_reasoning(get_preset(name))
    b, s = big.learner.batch, small.learner.batch
    assert (s.n_reuse, s.n_sgd) == (b.n_reuse, b.n_sgd)
    assert s.rollout_batch // s.mini_batch == b.rollout_batch // b.mini_batch
    assert s.rollout_batch == 16 and small.group_size == 8
    assert (small.temperature, small.learner.lag) == (big.temperature, big.learner.lag)
    assert small.learner.loss == big.learner.loss
    assert small.learner.entropy == big.learner.entropy
    assert small.learner.advantage.truncation_mask == big.learner.advantage.truncation_mask


def test_budgets_are_the_papers_over_128():
    assert [s.max_tokens for s in scale_to_reasoning(get_preset("baseline")).data.stages] == [128]
    stages = scale_to_reasoning(get_preset("multistage")).data.stages
    assert [(s.max_tokens, s.steps) for s in stages] == [(64, 4), (128, 4), (256, None)]
    assert scale_to_reasoning(get_preset("multistage")).data.online_filter


def test_overlong_shaping_scales_with_the_budget():
    cfg = get_preset("multistage")
    cfg.learner.advantage.overlong_cache = 4096                               # DAPO's L_cache at 8K..32K
    assert scale_to_reasoning(cfg).learner.advantage.overlong_cache == 32
    assert scale_to_reasoning(get_preset("baseline")).learner.advantage.overlong_cache is None


def test_cli_flag_and_worlds_exclusive():
    cfg, _ = build_config(["--reasoning", "--steps", "3", "--run_id", "r"], default_preset="offpolicy_reuse4")
    assert cfg.world == "reasoning" and cfg.steps == 3 and cfg.learner.batch.n_sgd == 16
    assert build_config(["--world", "reasoning", "--steps", "3", "--run_id", "r"],
                        default_preset="offpolicy_reuse4")[0] == cfg
    with pytest.raises(SystemExit):
        build_config(["--reasoning", "--tiny"], default_preset="onpolicy")
    with pytest.raises(SystemExit):
        build_config(["--reasoning", "--shapes"], default_preset="onpolicy")
    with pytest.raises(SystemExit):
        build_config(["--world", "tiny", "--reasoning"], default_preset="onpolicy")
    with pytest.raises(ValueError, match="world"):
        RunConfig(world="tiny,reasoning")


def test_science_runs_ask_for_the_world_by_its_flag(tmp_path):
    spec = RunSpec("onpolicy", (), "reasoning", 0, 3)
    argv = spec.argv(tmp_path)
    assert argv[:3] == ["--preset", "onpolicy", "--reasoning"]
    cfg, _ = build_config(argv, default_preset="onpolicy")
    assert cfg.world == "reasoning" and cfg.steps == 3
    assert RunSpec("onpolicy", (), "tiny", 0, 3).argv(tmp_path)[2] == "--tiny"
    assert "--reasoning" not in RunSpec("onpolicy", (), None, 0, 3).argv(tmp_path)


def test_minibatch_arm_keeps_four_minibatches_in_every_world(tmp_path):
    from launch.experiments.science.findings import MINIBATCHES as arm
    for world in ("tiny", "reasoning", None):
        cfg, _ = build_config(RunSpec(arm.preset, arm.overrides, world, 0, 3).argv(tmp_path), default_preset=arm.preset)
        b = cfg.learner.batch
        assert (b.rollout_batch // b.mini_batch, b.n_reuse, b.n_sgd, str(cfg.learner.lag)) == (4, 1, 4, "sync")
