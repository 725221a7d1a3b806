"""Weights through Ray's object store (the default transport; CPU and multi-node).

``publish`` puts a detached CPU copy of every tensor into the object store; a small named
``WeightStore`` actor holds references to the latest versions so any actor, including one Ray
restarted after a crash, can fetch them by name. Every version copies the whole model through
the object store, so this is for small models; GPU clusters use a collective broadcast.
"""

from __future__ import annotations

from typing import Iterable

import ray
import torch

from actors.transport import NamedTensors


@ray.remote(num_cpus=0)
class WeightStore:
    """Holds object references to the last `keep` published versions (not the tensors)."""

    def __init__(self, keep: int = 2):
        self.keep = keep
        self.refs: dict[int, ray.ObjectRef] = {}

    def put(self, version: int, wrapped_ref: list[ray.ObjectRef]) -> None:
        # The ref arrives wrapped in a list so Ray passes the reference, not the tensors.
        self.refs[version] = wrapped_ref[0]
        for old in sorted(self.refs)[:-self.keep]:
            del self.refs[old]

    def get(self, version: int) -> list[ray.ObjectRef]:
        if version not in self.refs:
            raise KeyError(f"weights of version {version} are gone; have {sorted(self.refs)}")
        return [self.refs[version]]

    def versions(self) -> list[int]:
        return sorted(self.refs)


class RayObjectStoreTransport:
    """`ray://<store actor name>/<version>` locations backed by the Ray object store."""

    scheme = "ray"

    def __init__(self, run_id: str, keep: int = 2):
        self.store_name = f"lagrl-weights-{run_id}"
        self.keep = keep
        self._store = None

    def _store_handle(self, create: bool):
        if self._store is None:
            if create:
                # on the publisher's node (learner rank 0): Ray would place a 0-CPU actor anywhere,
                # and a generation node that dies would take every version with it
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
                self._store = WeightStore.options(name=self.store_name, get_if_exists=True, lifetime=None,
                                                  scheduling_strategy=here).remote(self.keep)
            else:
                self._store = ray.get_actor(self.store_name)
        return self._store

    def publish(self, params: Iterable[tuple[str, torch.Tensor]], version: int) -> str:
        # Detached CPU copies: the learner keeps training while actors read this snapshot.
        snapshot = [(name, t.detach().to("cpu", copy=True).contiguous()) for name, t in params]
        ref = ray.put(snapshot)
        ray.get(self._store_handle(create=True).put.remote(version, [ref]))
        return f"{self.scheme}://{self.store_name}/{version}"

    def after_announce(self) -> None:
        pass

    def load_into(self, llm, location: str) -> None:
        llm.collective_rpc("lagrl_load_weights", args=(self.fetch(location),))

    def fetch(self, location: str) -> NamedTensors:
        scheme, _, rest = location.partition("://")
        name, _, version = rest.rpartition("/")
        if scheme != self.scheme or name != self.store_name:
            raise ValueError(f"location {location!r} is not from store {self.store_name!r}")
        wrapped = ray.get(self._store_handle(create=False).get.remote(int(version)))
        return ray.get(wrapped[0])
