"""The one-GPU layout (launch.config.layout): refusals at start, each naming its fix, the GPU count a
config needs, and the weight transport ``auto`` picks for each placement."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.config import ActorConfig
from launch.config import RunConfig
from launch.config.layout import (
    choose_transport,
    cluster_problems,
    engines_start_early,
    gpus_needed,
    one_gpu_share,
    resolved_actors,
)
from launch.config.overrides import ConfigError, apply_overrides
from learner.trainer_config import LearnerConfig

ONE_GPU = {"learner": {"gpus_per_rank": 0.5}, "actors": {"num_actors": 1, "num_gpus": 0.5,
                                                         "gpu_memory_utilization": 0.45}}


def run(learner: dict | None = None, actors: dict | None = None) -> RunConfig:
    return RunConfig(learner=learner or {}, actors=actors or {})


# --- refusals from the config alone -------------------------------------------------------------------
@pytest.mark.parametrize("actors, fix", [
    ({"num_gpus": 0.5, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.4}, "--actors.tensor_parallel_size 1"),
    ({"num_gpus": 0.5}, "--actors.gpu_memory_utilization 0.5 or less"),           # default 0.85 > the 0.5 share
    ({"num_gpus": 0.3, "gpu_memory_utilization": 0.31}, "--actors.gpu_memory_utilization 0.3 or less"),
    ({"num_gpus": 0.5, "gpu_memory_utilization": 0.4, "weight_transport": "collective",
      "collective": {"backend": "nccl"}}, "--actors.collective.backend gloo"),
])
def test_actor_gpu_share_refusals_name_the_fix(actors, fix):
    with pytest.raises(ValidationError, match=fix.replace(".", r"\.")):
        ActorConfig(**actors)


@pytest.mark.parametrize("learner, fix", [
    ({"gpus_per_rank": 0.5, "num_ranks": 2}, "--learner.num_ranks 1"),
    ({"gpus_per_rank": 0.5, "gpu_memory_fraction": 0.6}, "--learner.gpu_memory_fraction 0.5 or less"),
    ({"gpus_per_rank": 0.05}, "leaves no memory"),
])
def test_learner_gpu_share_refusals_name_the_fix(learner, fix):
    with pytest.raises(ValidationError, match=fix.replace(".", r"\.")):
        LearnerConfig(**learner)


def test_learner_on_cpu_ignores_gpu_fields():
    assert LearnerConfig(device="cpu", gpus_per_rank=0.5, num_ranks=2).num_ranks == 2


def test_learner_memory_fraction_defaults():
    assert LearnerConfig().memory_fraction() is None                           # a whole GPU: no cap
    assert LearnerConfig(gpus_per_rank=0.5).memory_fraction() == 0.45         # share - 0.05 headroom
    assert LearnerConfig(gpus_per_rank=0.5, gpu_memory_fraction=0.3).memory_fraction() == 0.3


def test_two_nccl_ranks_on_one_gpu_refused():
    with pytest.raises(ValidationError, match="NCCL cannot run two ranks on one GPU"):
        RunConfig(learner={"gpus_per_rank": 0.5},
                  actors={"num_gpus": 1, "weight_transport": "collective", "collective": {"backend": "nccl"}})


def test_nccl_with_a_cpu_side_refused():
    with pytest.raises(ValidationError, match="NCCL needs CUDA on every member"):
        RunConfig(learner={"device": "cpu"}, actors={"weight_transport": "collective",
                                                     "collective": {"backend": "nccl"}})


def test_refusal_through_cli_overrides_names_the_flag():
    with pytest.raises(ConfigError, match="--actors.gpu_memory_utilization 0.5 or less"):
        apply_overrides(RunConfig(), [("actors.num_gpus", "0.5")])
    cfg = apply_overrides(RunConfig(), [("learner.gpus_per_rank", "0.5"), ("actors.num_gpus", "0.5"),
                                        ("actors.gpu_memory_utilization", "0.45")])
    assert cfg.actors.num_gpus == 0.5 and cfg.learner.gpus_per_rank == 0.5


# --- refusals that need the cluster ----------------------------------------------------------------------
def test_gpus_needed_packs_fractions_and_rounds_whole_requests():
    lc = LearnerConfig(gpus_per_rank=0.5)
    assert gpus_needed(lc, ActorConfig(num_actors=1, num_gpus=0.5, gpu_memory_utilization=0.5), "cuda") == 1
    assert gpus_needed(lc, ActorConfig(num_actors=2, num_gpus=0.5, gpu_memory_utilization=0.5), "cuda") == 2
    assert gpus_needed(LearnerConfig(), ActorConfig(num_actors=2, num_gpus=1), "cuda") == 3
    assert gpus_needed(LearnerConfig(), ActorConfig(num_actors=2, num_gpus=1, tensor_parallel_size=2), "cuda") == 5
    assert gpus_needed(LearnerConfig(), ActorConfig(num_actors=2), "cpu") == 0
    three = ActorConfig(num_actors=3, num_gpus=0.25, gpu_memory_utilization=0.25)
    assert gpus_needed(LearnerConfig(gpus_per_rank=0.25), three, "cuda") == 1            # 4 x 0.25


def test_one_gpu_share():
    assert one_gpu_share(1) == 0.5 and one_gpu_share(2) == 0.33 and one_gpu_share(3) == 0.25


def test_whole_gpus_on_one_gpu_refused_with_the_sharing_fix():
    cfg = run(actors={"num_actors": 1, "num_gpus": 1})
    [problem] = cluster_problems(cfg, 1)
    assert "need 2 GPU(s), the cluster has 1" in problem
    assert ("--learner.gpus_per_rank 0.5 --actors.num_gpus 0.5 --actors.gpu_memory_utilization 0.5"
            in problem)
    assert cluster_problems(cfg, 2) == []


def test_two_engines_and_a_learner_on_one_gpu_need_a_smaller_share():
    cfg = run(learner={"gpus_per_rank": 0.5}, actors={"num_actors": 2, "num_gpus": 0.5, "gpu_memory_utilization": 0.5})
    [problem] = cluster_problems(cfg, 1)
    assert "need 2 GPU(s)" in problem and "--actors.num_gpus 0.33" in problem
    fixed = run(learner={"gpus_per_rank": 0.33},
                actors={"num_actors": 2, "num_gpus": 0.33, "gpu_memory_utilization": 0.33})
    assert cluster_problems(fixed, 1) == []


def test_gpus_asked_on_a_cpu_cluster_refused():
    assert "use --actors.num_gpus 0" in cluster_problems(run(**ONE_GPU), 0)[0]
    assert "has no GPU" in cluster_problems(run(learner={"device": "cuda"}), 0)[0]
    assert cluster_problems(run(), 0) == []                                     # the CPU default


def test_nccl_engines_on_a_cpu_cluster_refused():
    cfg = run(actors={"num_gpus": 1, "weight_transport": "collective", "collective": {"backend": "nccl"}})
    assert "but the Ray cluster has no GPU" in cluster_problems(cfg, 0)[0]    # learner auto -> cpu there


# --- what auto picks --------------------------------------------------------------------------------
def test_auto_on_cpu_is_the_object_store():
    choice = choose_transport(run(), 0)
    assert (choice.kind, choice.backend) == ("ray", None)
    assert choice.line() == ("[driver] weight transport: ray: auto: learner and engines on CPU: "
                             "the Ray object store")


def test_auto_on_one_shared_gpu_is_cuda_ipc():
    """The engines load from learner rank 0's staging buffer on the GPU they share (actors.transport.cuda_ipc)."""
    choice = choose_transport(run(**ONE_GPU), 1)
    assert (choice.kind, choice.backend) == ("cuda_ipc", None)
    assert "share a GPU" in choice.reason and "CUDA IPC" in choice.reason, choice.reason
    assert resolved_actors(run(**ONE_GPU), choice).weight_transport == "cuda_ipc"


def test_auto_sharing_a_gpu_on_several_is_collective_over_gloo():
    """CUDA IPC needs every engine on learner rank 0's GPU: with several GPUs the fractions may not keep them there."""
    choice = choose_transport(run(**ONE_GPU), 2)
    assert (choice.kind, choice.backend) == ("collective", "gloo")
    assert "NCCL cannot run two ranks on one GPU" in choice.reason
    actors = resolved_actors(run(**ONE_GPU), choice)
    assert actors.weight_transport == "collective" and actors.collective.backend == "gloo"


def test_cuda_ipc_is_refused_on_cpu_and_on_gpus_of_their_own():
    with pytest.raises(ValidationError, match="the cuda_ipc weight transport runs on cuda, the learner on cpu"):
        run(learner={"device": "cpu"}, actors={"weight_transport": "cuda_ipc"})
    own = run(actors={"num_actors": 2, "num_gpus": 1, "weight_transport": "cuda_ipc"})
    assert any("must share learner rank 0's GPU" in p for p in cluster_problems(own, 3))


def test_auto_with_engines_sharing_among_themselves_is_gloo():
    cfg = run(actors={"num_actors": 2, "num_gpus": 0.5, "gpu_memory_utilization": 0.5})   # learner: a whole GPU
    assert choose_transport(cfg, 2).backend == "gloo"


def test_auto_on_separate_gpus_is_nccl():
    choice = choose_transport(run(actors={"num_actors": 2, "num_gpus": 1}), 3)
    assert (choice.kind, choice.backend) == ("collective", "nccl")
    assert "GPUs of their own" in choice.reason


def test_auto_with_the_learner_on_gpu_and_engines_on_cpu_is_gloo():
    choice = choose_transport(run(), 1)                   # learner auto -> cuda; engines num_gpus 0
    assert (choice.kind, choice.backend) == ("collective", "gloo")


def test_auto_with_a_fixed_lag_is_the_object_store_on_any_placement():
    lagged = {"fixed_lag": 2, "mode": "off_policy", "max_lag": 2}
    for learner, actors, gpus in (({}, {}, 0), ({"gpus_per_rank": 0.5}, ONE_GPU["actors"], 1),
                                  ({}, {"num_actors": 2, "num_gpus": 1}, 3)):
        choice = choose_transport(run(learner={**lagged, **learner}, actors=actors), gpus)
        assert (choice.kind, choice.backend) == ("ray", None) and "fixed_lag 2" in choice.reason
    with pytest.raises(ValidationError, match="use --actors.weight_transport ray"):
        run(learner=lagged, actors={"weight_transport": "collective"})


def test_explicit_choices_are_kept_and_the_backend_made_concrete():
    assert choose_transport(run(actors={"weight_transport": "ray", **ONE_GPU["actors"]},
                                learner=ONE_GPU["learner"]), 1).kind == "ray"
    shared = run(learner=ONE_GPU["learner"], actors={**ONE_GPU["actors"], "weight_transport": "collective"})
    assert choose_transport(shared, 1).backend == "gloo"
    cpu = run(actors={"weight_transport": "collective"})
    assert (choose_transport(cpu, 0).kind, choose_transport(cpu, 0).backend) == ("collective", "gloo")


def test_an_actor_without_a_driver_falls_back_to_the_object_store():
    assert ActorConfig().transport_or_default().weight_transport == "ray"
    assert ActorConfig(weight_transport="collective").transport_or_default().weight_transport == "collective"


def test_engines_start_early_only_without_membership_or_a_shared_gpu():
    assert engines_start_early(run(), 0, transport_has_membership=False)                 # CPU, object store
    assert not engines_start_early(run(), 0, transport_has_membership=True)              # collective
    assert not engines_start_early(run(**ONE_GPU), 1, transport_has_membership=False)    # vLLM profiles memory
    assert engines_start_early(run(actors={"num_gpus": 1}), 2, transport_has_membership=False)


def test_the_smokes_gpu_run_fits_one_gpu(tmp_path):
    """Stage 5 of `python -m launch.ops.smoke` on a one-GPU host shares the GPU between its actor and the
    learner rank (on an H100 it was refused: the learner asked for a whole GPU beside a 0.5 engine)."""
    from launch.config.layout import config_problems
    from launch.ops.smoke.context import Context

    cfg = Context(device="cuda", work=tmp_path, steps=2).run_config()
    assert config_problems(cfg) == []
    assert cluster_problems(cfg, 1) == []
    assert cfg.learner.device == "cuda" and cfg.actors.num_gpus == 0.5
