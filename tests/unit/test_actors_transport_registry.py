"""The weight-transport registry (actors.transport.registry): every rule about which transport fits a run
is read from the entries, so a transport registered there is picked up, or refused by its capabilities,
by the config, the layout, transport_for and the smoke without another edit."""

from __future__ import annotations

import importlib

import pytest
from pydantic import ValidationError

from actors.config import ActorConfig
from actors.transport import make_transport, registry, transport_for
from actors.transport.registry import CPU, MIXED, OWN_GPUS, SHARED_GPU, TransportEntry, Where
from launch.config import RunConfig
from launch.config.layout import choose_transport, cluster_problems, config_problems, resolved_actors
from launch.ops.smoke.context import Context

ONE_GPU = {"learner": {"gpus_per_rank": 0.5}, "actors": {"num_actors": 1, "num_gpus": 0.5,
                                                         "gpu_memory_utilization": 0.45}}
LAGGED = {"fixed_lag": 2, "mode": "off_policy", "max_lag": 2}


class FakeTransport:
    """Stands in for a module in actors/transport/ (the entries below name it)."""

    def __init__(self, run_id: str):
        self.run_id = run_id


# CUDA IPC-like: GPU only, fine on a shared GPU, the newest version only, auto's choice on a shared GPU
IPC = TransportEntry(impl=f"{__name__}:FakeTransport", title="a fake CUDA IPC handle", help="test only",
                     serves_older_versions=False, devices=frozenset({"cuda"}), shares_a_gpu=True,
                     auto_on=frozenset({SHARED_GPU}), aliases=("fake_ipc",))
# needs GPUs of its own
WHOLE = TransportEntry(impl=f"{__name__}:FakeTransport", title="a fake whole-GPU link", help="test only",
                       serves_older_versions=False, devices=frozenset({"cuda"}), shares_a_gpu=False)
# host memory only
HOST = TransportEntry(impl=f"{__name__}:FakeTransport", title="a fake host pipe", help="test only",
                      serves_older_versions=True, devices=frozenset({"cpu"}))


@pytest.fixture
def fakes(monkeypatch):
    """ipc first (auto prefers the first fitting entry), the others last; the real cuda_ipc left out (the fake
    stands in for a transport the registry does not have yet)."""
    real = {k: e for k, e in registry.TRANSPORTS.items() if k != "cuda_ipc"}
    monkeypatch.setattr(registry, "TRANSPORTS", {"ipc": IPC, **real, "whole": WHOLE, "host": HOST})


def run(learner: dict | None = None, actors: dict | None = None) -> RunConfig:
    return RunConfig(learner=learner or {}, actors=actors or {})


def test_each_entry_names_a_class_with_the_capabilities_it_declares():
    for name, entry in registry.TRANSPORTS.items():
        module, _, cls = entry.impl.partition(":")
        impl = getattr(importlib.import_module(module), cls)
        assert callable(getattr(impl, "location_for", None)) == entry.serves_older_versions, name
        assert entry.devices <= registry.DEVICES and entry.auto_on <= set(registry.PLACEMENTS), name
        if entry.settings is not None:
            assert entry.settings in ActorConfig.model_fields, name
    assert registry.aliases() == {"nccl": "collective"}                 # the alias lives once


def test_auto_picks_by_placement_and_lag():
    assert registry.auto_kind(Where("cpu", "cpu")) == "ray"
    assert registry.auto_kind(Where("cuda", "cuda")) == "collective"
    assert registry.auto_kind(Where("cuda", "cuda", shared_gpu=True)) == "cuda_ipc"          # on the one GPU
    assert registry.auto_kind(Where("cuda", "cuda", shared_gpu=True, gpus=2)) == "collective"  # not on several
    assert registry.auto_kind(Where("cuda", "cpu")) == "collective"
    assert registry.auto_kind(None) == "ray"                            # no placement known
    for where in (Where("cpu", "cpu"), Where("cuda", "cuda"), Where("cuda", "cuda", True), None):
        assert registry.auto_kind(where, versions=3) == "ray"           # a fixed lag: the one keeping versions
    assert [Where("cpu", "cpu").placement, Where("cuda", "cuda").placement, Where("cpu", "cuda").placement] == \
        [CPU, OWN_GPUS, MIXED]
    assert ActorConfig().transport_or_default().weight_transport == "ray"


def test_unknown_kinds_name_the_known_ones():
    with pytest.raises(ValidationError, match="unknown weight transport 'smoke-signals'; choose from auto, ray, "
                                              r"cuda_ipc, collective \(nccl = collective\)"):
        ActorConfig(weight_transport="smoke-signals")
    with pytest.raises(ValueError, match="choose from ray, cuda_ipc, collective"):
        make_transport("smoke-signals", "r")
    with pytest.raises(ValueError, match="resolved from the placement first"):
        transport_for(ActorConfig(), "r")                              # auto never reaches transport_for


def test_a_registered_transport_is_accepted_and_chosen_by_its_capabilities(fakes, tmp_path):
    # the config: the name and its alias, an unknown name's message lists it
    assert ActorConfig(weight_transport="fake_ipc").weight_transport == "ipc"
    with pytest.raises(ValidationError, match="choose from auto, ipc, ray, collective, whole, host"):
        ActorConfig(weight_transport="pigeon")
    # the layout: auto prefers it where its auto_on says (a shared GPU), not elsewhere
    choice = choose_transport(run(**ONE_GPU), 1)
    assert (choice.kind, choice.backend) == ("ipc", None) and "a fake CUDA IPC handle" in choice.reason
    assert resolved_actors(run(**ONE_GPU), choice).weight_transport == "ipc"
    assert choose_transport(run(), 0).kind == "ray"
    assert choose_transport(run(actors={"num_actors": 2, "num_gpus": 1}), 3).kind == "collective"
    asked = run(learner=ONE_GPU["learner"], actors={**ONE_GPU["actors"], "weight_transport": "ipc"})
    assert choose_transport(asked, 1).kind == "ipc" and cluster_problems(asked, 1) == []
    # transport_for builds its class
    assert isinstance(transport_for(asked.actors, "r"), FakeTransport)
    # the smoke: on one GPU every transport that runs there; on CPU not the GPU-only ones
    assert Context(device="cuda", work=tmp_path, steps=1).smoke_transports() == ["ipc", "ray", "collective"]
    assert "host" in [k for k in registry.fitting(Where("cpu", "cpu"), versions=3)]     # it keeps versions
    assert Context(device="cpu", work=tmp_path, steps=1).smoke_transports() == ["ray", "collective", "host"]


def test_a_registered_transport_is_refused_by_its_capabilities(fakes):
    # devices: GPU only, asked for with the learner on CPU (the config alone); CPU only, with a learner left
    # at 'auto' on a GPU cluster (the cluster tells)
    with pytest.raises(ValidationError, match="the ipc weight transport runs on cuda, the learner on cpu: use "
                                              "--actors.weight_transport ray or collective"):
        run(learner={"device": "cpu", "num_ranks": 1}, actors={"num_gpus": 1, "weight_transport": "ipc"})
    host = run(actors={"weight_transport": "host"})
    assert cluster_problems(host, 0) == []
    assert cluster_problems(host, 1) == ["the host weight transport runs on cpu, the learner on cuda: use "
                                         "--actors.weight_transport ray or collective"]
    # a shared GPU
    with pytest.raises(ValidationError, match="cannot run with the learner and engines sharing a GPU: use "
                                              "--actors.weight_transport ipc or ray or collective"):
        run(learner=ONE_GPU["learner"], actors={**ONE_GPU["actors"], "weight_transport": "whole"})
    assert config_problems(run(actors={"num_actors": 2, "num_gpus": 1, "weight_transport": "whole"})) == []
    # a fixed lag: only the transports keeping older versions
    with pytest.raises(ValidationError, match="serves only the newest version.*use --actors.weight_transport ray"):
        run(learner=LAGGED, actors={"num_gpus": 1, "weight_transport": "ipc"})
    with pytest.raises(ValueError, match="use --actors.weight_transport ray"):
        transport_for(ActorConfig(weight_transport="ipc"), "r", keep_versions=3)
    assert choose_transport(run(learner={**LAGGED, **ONE_GPU["learner"]}, actors=ONE_GPU["actors"]), 1).kind == "ray"
