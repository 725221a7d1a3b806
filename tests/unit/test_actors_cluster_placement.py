"""Placement fields of the configs: custom resources are bounded and Ray-valid; a local run gets
the custom resources its config asks for; checkpoint_dir and model_source parse."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.config import ActorConfig
from actors.cluster.placement import placement_line
from launch.config import RunConfig
from learner.trainer_config import LearnerConfig


def test_defaults_keep_single_node_behaviour():
    a, lc = ActorConfig(), LearnerConfig()
    assert a.resources == {} and lc.resources == {}
    assert a.avoid_driver_node and lc.avoid_driver_node      # only acts on a cluster of several nodes
    assert lc.checkpoint_dir is None and RunConfig().data.model_source == "auto"


@pytest.mark.parametrize("resources", [{"gen": 1}, {"gen": 0.5, "fast_disk": 2}, {"train": 8}])
def test_custom_resources_accepted(resources):
    assert ActorConfig(resources=resources).resources == resources
    assert LearnerConfig(resources=resources).resources == resources


@pytest.mark.parametrize("resources, why", [
    ({"CPU": 1}, "not a custom resource"), ({"GPU": 1}, "not a custom resource"),
    ({"memory": 1e9}, "not a custom resource"), ({"node:127.0.0.1": 1}, "not a custom resource"),
    ({"gen": 0}, "not in"), ({"gen": -1}, "not in"), ({"gen": 1e6}, "not in"),
    ({"gen": 1.5}, "whole amounts"), ({f"r{i}": 1 for i in range(9)}, "at most 8"),
])
def test_custom_resources_refused(resources, why):
    with pytest.raises(ValidationError, match=why):
        ActorConfig(resources=resources)
    with pytest.raises(ValidationError, match=why):
        LearnerConfig(resources=resources)


def test_cli_overrides_reach_placement_fields():
    from launch.run.compose import build_config

    cfg, _ = build_config(["--tiny", "--actors.resources", '{"gen": 1}', "--learner.resources", '{"train": 1}',
                           "--learner.checkpoint_dir", "/shared/ckpt", "--data.model_source", "object_store"],
                          default_preset="onpolicy")
    assert cfg.actors.resources == {"gen": 1} and cfg.learner.resources == {"train": 1}
    assert cfg.learner.checkpoint_dir == "/shared/ckpt" and cfg.data.model_source == "object_store"


def test_local_ray_gets_the_custom_resources_the_config_needs():
    from launch.run.driver import local_resources

    cfg = RunConfig.model_validate({"actors": {"num_actors": 3, "resources": {"gen": 0.5, "fast": 1}},
                                    "learner": {"num_ranks": 2, "resources": {"train": 1, "fast": 1}}})
    # 3 actors x 0.5 gen = 1.5 -> 2 whole; fast: 3 x 1 + 2 x 1
    assert local_resources(cfg) == {"gen": 2.0, "fast": 5.0, "train": 2.0}
    assert local_resources(RunConfig()) == {}


def test_placement_line_names_every_process():
    at = {"node_id": "a" * 56, "name": "gen-1", "ip": "127.0.0.1", "pid": 1}
    line = placement_line({"driver": {**at, "name": "head"}, "actors": {"lagrl-gen-r-0": at},
                           "learner": [{**at, "name": "train-1"}]})
    assert line == ("[driver] placement: driver on head (127.0.0.1, aaaaaaaa); lagrl-gen-r-0 on gen-1 "
                    "(127.0.0.1, aaaaaaaa); learner rank 0 on train-1 (127.0.0.1, aaaaaaaa)")


def test_a_checkpoint_the_driver_cannot_see_is_refused(tmp_path):
    from learner.checkpoint import CheckpointNotShared, require_visible

    ckpt = tmp_path / "step_000004"
    (ckpt / "hf").mkdir(parents=True)
    (ckpt / "hf" / "config.json").write_text("{}")
    (ckpt / "rng_rank0.pt").write_bytes(b"x")
    require_visible(ckpt, world=1)                       # everything rank 0 wrote is here
    with pytest.raises(CheckpointNotShared, match=r"rng_rank1.pt written by the learner ranks on node train-2 "
                                                  r"\(10.0.0.7\) are not visible from the driver"):
        require_visible(ckpt, world=2, writers=" on node train-2 (10.0.0.7)")
    (ckpt / "hf" / "config.json").unlink()
    with pytest.raises(CheckpointNotShared, match="hf/config.json"):
        require_visible(ckpt, world=1)
