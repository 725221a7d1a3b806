"""How new policy weights travel from the learner to the generation actors (DESIGN.md §8).

The interface only: no Ray or vLLM import here, so the learner and the driver depend on this
module and never on a concrete transport. Implementations live beside it, one module each,
and are imported by name when :func:`make_transport` builds one:

- ``object_store`` (``ray``, the default; CPU and multi-node): tensors go into Ray's object
  store and a small named actor keeps references to the latest versions.
- ``nccl`` (GPU clusters): a broadcast from learner rank 0 straight into every engine worker.

Protocol of one version v:

    learner (rank 0):  location = transport.publish(params, v)
    coordinator:       buffer.publish_version(v, location)     # (version, location) atomically
    learner (rank 0):  transport.after_announce()               # a broadcast happens here
    actor:             sees v in the buffer -> transport.load_into(llm, location)

A *location* is a string ending in ``/<version>``.
"""

from __future__ import annotations

import importlib
from typing import Iterable, Protocol

import torch

NamedTensors = list[tuple[str, torch.Tensor]]

# kind (ActorConfig.weight_transport) -> "module:class" of its implementation
IMPLEMENTATIONS = {
    "ray": "actors.transport.object_store:RayObjectStoreTransport",
    "nccl": "actors.transport.nccl:NcclBroadcastTransport",
}


class WeightTransport(Protocol):
    """Learner side: ``publish``, the coordinator writes (version, location) to the buffer, then
    ``after_announce``. Actor side: ``load_into`` when the buffer shows a newer version."""

    def publish(self, params: Iterable[tuple[str, torch.Tensor]], version: int) -> str:
        """Make ``params`` available as ``version``; return the location actors load from."""

    def after_announce(self) -> None:
        """Called once the version is visible in the buffer (a collective broadcasts here)."""

    def load_into(self, llm, location: str) -> None:
        """Actor side: load the weights at ``location`` into a running vLLM engine."""


def parse_location_version(location: str) -> int:
    """The version encoded at the end of a location string."""
    try:
        return int(location.rstrip("/").rpartition("/")[2])
    except ValueError:
        raise ValueError(f"weight location {location!r} does not end in /<version>") from None


def make_transport(kind: str, run_id: str, **kwargs) -> WeightTransport:
    """The transport named by ``ActorConfig.weight_transport``."""
    if kind not in IMPLEMENTATIONS:
        raise ValueError(f"unknown weight transport {kind!r}; choose from {sorted(IMPLEMENTATIONS)}")
    module, _, name = IMPLEMENTATIONS[kind].partition(":")
    return getattr(importlib.import_module(module), name)(run_id, **kwargs)
