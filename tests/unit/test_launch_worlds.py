"""launch.worlds: the registry is the one place a world is named; every entry resolves, and the config
type, the CLI flags and the driver's data all come from it."""

from __future__ import annotations

import typing

import pytest

from launch.run.compose import build_config
from launch.config import DataConfig, RunConfig
from launch.config.presets import get_preset
from launch.worlds import WORLDS, entry, load, scale_to_world, world_data


def test_every_entry_resolves_to_its_three_parts():
    for name, spec in WORLDS.items():
        assert callable(load(spec.scale)) and callable(load(spec.build)), name
        assert "{problem}" in load(spec.template), name
        cfg = scale_to_world(get_preset("onpolicy"), name)
        assert cfg.world == name and cfg.actors.num_gpus == 0 and cfg.learner.num_ranks == 1
        # the worlds' tokenizers have no chat template, but the code world's (its rows are chat messages)
        assert cfg.data.chat_template is (name == "code")
    with pytest.raises(KeyError, match="unknown world 'nope'; choose from: tiny, reasoning, code, routes, slips, shapes"):
        entry("nope")


def test_the_config_type_and_the_flags_are_the_registered_names():
    names, none = typing.get_args(RunConfig.model_fields["world"].annotation)
    assert typing.get_args(names) == tuple(WORLDS) and none is type(None)
    for name in WORLDS:
        by_alias, _ = build_config([f"--{name}", "--run_id", "r"], default_preset="onpolicy")
        by_name, _ = build_config(["--world", name, "--run_id", "r"], default_preset="onpolicy")
        assert by_alias == by_name and by_alias.world == name
    assert build_config(["--run_id", "r"], default_preset="onpolicy")[0].world is None


def test_world_data_prefers_what_the_run_names(tiny_world):
    assert world_data("tiny", DataConfig()) == (str(tiny_world.model_dir), str(tiny_world.train_path),
                                                str(tiny_world.val_path), "Q: {problem}\nA: ")
    mine = DataConfig(model_dir="/m", train_path="/t.jsonl", eval_path="/e.jsonl")
    assert world_data("tiny", mine) == ("/m", "/t.jsonl", "/e.jsonl", "Q: {problem}\nA: ")
    assert entry("shapes").evaluates is False and entry("tiny").evaluates   # the shapes world has no eval split


def test_an_estimator_without_a_measured_tiny_lr_still_scales():
    """A new advantage estimator must not break --tiny / --code until its lr is measured: it starts from GRPO's."""
    from launch.worlds.tiny.scale import TINY_LR, tiny_lr

    assert tiny_lr("rloo") == TINY_LR["rloo"] and tiny_lr("a-new-estimator") == TINY_LR["grpo"]
