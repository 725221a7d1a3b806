"""Weights through Ray's object store (the default transport; CPU and multi-node).

``publish`` puts a detached CPU copy of every tensor into the object store; a small named
``WeightStore`` actor holds references to the latest versions so any actor, including one Ray
restarted after a crash, can fetch them by name. Every version copies the whole model through
the object store, so this is for small models; GPU clusters use a collective broadcast.

Into the engine: the actor stages the fetched version in one shared-memory file
(``actors.transport.shm``) and loads it through lagrl's vLLM weight-transfer backend
(``vllm_engine.LagrlShmEngine``): only the file's path and layout cross vLLM's IPC, so the same
calls load an in-process engine and one whose core runs in its own process. The file is
removed once the engine has loaded it, also when loading failed; the node's staging lock is held
from write to removal, so a node's actors stage one copy at a time (``actors.transport.staging``).
Attaching sweeps what dead writers of this node left staged.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable

import numpy as np
import ray

from actors.transport import NamedTensors, WeightSource, as_source, parse_location_version


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
    upkeep_s = None         # nothing to maintain: any actor can fetch any kept version by name
    pushes = False          # an actor fetches a published version itself

    def __init__(self, run_id: str, keep: int = 2):
        self.store_name = f"lagrl-weights-{run_id}"
        self.keep = keep
        self._store = None
        self._actor = "actor"
        self._keepalive: Callable[[], None] | None = None
        self._consistent = True    # False after a load failed part-way (the engine holds two versions)
        self.stats: dict = {}

    @property
    def consistent(self) -> bool:
        return self._consistent

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

    # ---- learner side
    def bind_learner(self, rank: int, host: str, device: str) -> RayObjectStoreTransport:
        return self

    def publish(self, weights, version: int) -> str | None:
        """Every learner rank calls this; rank 0 stores the snapshot (the others only take part in
        the ZeRO-3 gathers, one tensor at a time as before)."""
        source: WeightSource = as_source(weights)
        if source.rank != 0 and not source.collective:
            return None
        snapshot = []
        for bucket in source.buckets([[m] for m in source.metadata()]):
            if source.rank == 0:
                # Detached CPU copies: the learner keeps training while actors read this snapshot.
                snapshot += [(name, t.detach().to("cpu", copy=True).contiguous()) for name, t in bucket]
        if source.rank != 0:
            return None
        ref = ray.put([_to_wire(name, t) for name, t in snapshot])
        ray.get(self._store_handle(create=True).put.remote(version, [ref]))
        return f"{self.scheme}://{self.store_name}/{version}"

    def after_announce(self, weights=None, catch_up: bool = False) -> None:
        return None

    def learner_status(self) -> None:
        return None

    # ---- actor side
    def llm_kwargs(self) -> dict:
        from actors.transport.vllm_engine import SHM_BACKEND, register

        register()                   # in this process too: an in-process engine's worker runs in it
        return {"weight_transfer_config": {"backend": SHM_BACKEND}}

    def attach(self, actor_id: str, llm, keepalive: Callable[[], None] | None = None) -> None:
        from actors.transport.staging import sweep

        self._actor, self._keepalive = actor_id, keepalive
        sweep()                      # a killed predecessor's staged copy is memory until then
        llm.init_weight_transfer_engine({"init_info": {}})

    def poll(self, llm, have: int, published: tuple[int, str], force: bool = False) -> int:
        """The buffer's version when it is newer than the engine's (or differs, with ``force``)."""
        version, location = published
        if location and (version > have or force and version != have):
            self.load_into(llm, location)
            return version
        return have

    def wait_for_send(self, timeout_s: float) -> bool:
        return False            # nothing is sent: ``poll`` fetches the published version

    def load_into(self, llm, location: str) -> None:
        """Fetch the version, stage it in shared memory, load it through the engine's weight transfer."""
        from actors.transport.shm import write_version
        from actors.transport.staging import node_lock

        version = parse_location_version(location)
        t0 = time.monotonic()
        tensors = self.fetch(location)      # views of the object store's memory: no copy yet
        with node_lock(on_wait=self._keepalive) as wait_s:
            t1 = time.monotonic()
            staged = write_version(tensors, f"{self._actor}-v{version}")
            t2 = time.monotonic()
            started = False
            try:
                llm.start_weight_update()
                started = True
                llm.update_weights({"update_info": staged.update_info(version)})
                llm.finish_weight_update()
            except BaseException:
                if started:
                    self._consistent = False
                raise
            finally:
                staged.remove()
        self._consistent = True
        self.stats = {"version": version, "bytes": staged.nbytes, "lock_wait_s": wait_s,
                      "stage_s": (t1 - t0 - wait_s) + (t2 - t1), "load_s": time.monotonic() - t2}

    def location_for(self, version: int) -> str:
        """Where any of the last ``keep`` versions is (fixed lag: older than the newest one)."""
        return f"{self.scheme}://{self.store_name}/{version}"

    def versions(self) -> list[int]:
        """The versions the store keeps now (oldest first; [] before the first publish)."""
        try:
            return ray.get(self._store_handle(create=False).versions.remote())
        except ValueError:                 # no store actor yet
            return []

    def fetch(self, location: str) -> NamedTensors:
        scheme, _, rest = location.partition("://")
        name, _, version = rest.rpartition("/")
        if scheme != self.scheme or name != self.store_name:
            raise ValueError(f"location {location!r} is not from store {self.store_name!r}")
        wrapped = ray.get(self._store_handle(create=False).get.remote(int(version)))
        return [_from_wire(*item) for item in ray.get(wrapped[0])]


# A version crosses the object store as raw bytes in numpy arrays, which Ray stores with one copy and
# hands back as read-only views of its shared memory; torch tensors went through torch's pickling
# (a copy and a Python call per tensor on both sides: ~8 ms of a tiny model's 15 ms fetch).
def _to_wire(name: str, t) -> tuple[str, str, tuple[int, ...], np.ndarray]:
    import torch

    return name, str(t.dtype).removeprefix("torch."), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy()


def _from_wire(name: str, dtype: str, shape: tuple[int, ...], data: np.ndarray):
    """(name, a read-only tensor over ``data``: the object store's memory; read it, never write to it)."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        flat = torch.from_numpy(data)
    return name, flat.view(getattr(torch, dtype)).reshape(shape)
