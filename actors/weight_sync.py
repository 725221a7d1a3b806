"""How new policy weights travel from the learner to the generation actors.

The learner publishes `(name, tensor)` pairs with a version and gets back a *location* string,
which it writes to the buffer's `version` key together with the version (atomically), so an
actor that sees version v in Redis also knows where v's weights are. Actors fetch by location
and load the tensors into their running engine (see `actors.worker_extension`).

Two transports behind one interface (DESIGN.md §8):
- `RayObjectStoreTransport` (default; CPU and multi-node): tensors go into Ray's object store;
  a small named `WeightStore` actor holds references to the latest versions so any actor,
  including one Ray restarted after a crash, can fetch them by name.
- `actors.nccl_sync.NcclBroadcastTransport` (GPU clusters): a broadcast from learner rank 0
  straight into every engine's GPU memory.
"""

from __future__ import annotations

from typing import Iterable, Protocol

import ray
import torch

NamedTensors = list[tuple[str, torch.Tensor]]


class WeightTransport(Protocol):
    """Learner side: `publish`, write (version, location) to the buffer, then `after_announce`.
    Actor side: `load_into` when the buffer shows a newer version."""

    def publish(self, params: Iterable[tuple[str, torch.Tensor]], version: int) -> str:
        """Make `params` available as `version`; return the location actors load from."""

    def after_announce(self) -> None:
        """Called once the version is visible in the buffer (NCCL broadcasts here)."""

    def load_into(self, llm, location: str) -> None:
        """Actor side: load the weights at `location` into a running vLLM engine."""


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
                self._store = WeightStore.options(name=self.store_name, get_if_exists=True,
                                                  lifetime=None).remote(self.keep)
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


def parse_location_version(location: str) -> int:
    """The version encoded at the end of a location string."""
    return int(location.rstrip("/").rpartition("/")[2])


def make_transport(kind: str, run_id: str, **kw) -> WeightTransport:
    """The transport named by `ActorConfig.weight_transport`."""
    if kind == "ray":
        return RayObjectStoreTransport(run_id)
    from actors.nccl_sync import NcclBroadcastTransport
    return NcclBroadcastTransport(run_id, **kw)
