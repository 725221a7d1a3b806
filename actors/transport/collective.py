"""Weights by collective broadcast from learner rank 0 into every engine worker (GPU clusters; CPU too).

The :class:`~actors.transport.WeightTransport` made of the parts beside it:
``hub`` (control plane, a TCPStore learner rank 0 serves), ``channel`` (data plane: one gloo
or NCCL group per generation, bucketed broadcasts), ``sender`` (learner side), ``receiver``
(actor side) and ``vllm_engine`` (the receiving end inside vLLM's weight-transfer API).

Who calls what:

- driver: ``transport_for(cfg.actors, run_id)``, picklable, no hub yet; the learner binds it on
  every rank, rank 0 serves the hub and returns a copy that carries its address
  (``Learner.actor_transport``), which every actor gets at construction (and again when Ray
  restarts it, with the same arguments);
- actor: ``attach`` after its engine is built (registers a new incarnation), then ``poll``
  between engine steps;
- learner: ``publish`` (no copy: just the location ``collective://host:port/<version>``), then,
  once the version is in the buffer, ``after_announce`` on every rank (a send, see ``sender``),
  and ``after_announce(catch_up=True)`` while waiting for data when ``learner_status()`` says
  a live actor lacks the published version (Ray restarted it, or it was too busy to join).
"""

from __future__ import annotations

import time
from typing import Callable

from actors.transport.config import CollectiveConfig
from actors.transport import WeightTransferError, as_source, parse_location_version


class CollectiveTransport:
    scheme = "collective"
    pushes = True            # learner rank 0 sends each version; an actor joins the send at a poll

    def __init__(self, run_id: str, cfg: CollectiveConfig | None = None, address: tuple[str, int] | None = None):
        self.run_id, self.cfg, self.address = run_id, cfg or CollectiveConfig(), address
        self._sender = None          # learner rank 0
        self._receiver = None        # actor
        self._rank = None
        self._bucket_bytes = None    # every learner rank plans the same buckets (ZeRO-3 lockstep)

    @property
    def upkeep_s(self) -> float:
        return self.cfg.catch_up_every_s

    def __getstate__(self) -> dict:
        # The hub server, its clients and the channels belong to one process; the copy carries
        # what a new process needs to connect.
        return {"run_id": self.run_id, "cfg": self.cfg, "address": self.address,
                "_sender": None, "_receiver": None, "_rank": None, "_bucket_bytes": None}

    # ---- learner side
    def bind_learner(self, rank: int, host: str, device: str) -> CollectiveTransport:
        from actors.transport.sender import CollectiveSender, bucket_bytes

        self._rank, self._bucket_bytes = rank, bucket_bytes(self.cfg, device)
        if rank != 0:
            return self
        self._sender = CollectiveSender(self.cfg, host, device)
        self.address = (self._sender.hub.host, self._sender.hub.port)
        return self

    def publish(self, weights, version: int) -> str | None:
        """No copy: the weights are read bucket by bucket when the broadcast happens."""
        if self._sender is None:
            return None
        self._sender.published(version)
        return self._sender.location(version)

    def after_announce(self, weights, catch_up: bool = False) -> dict | None:
        source = as_source(weights)
        if self._sender is None:                 # other ranks: gather in step with rank 0
            if source.collective:
                from actors.transport.channel import plan_buckets
                from actors.transport.sender import drain

                drain(source, plan_buckets(source.metadata(), self._bucket_bytes))
            return None
        return self._sender.send(source, catch_up=catch_up).as_dict()

    def learner_status(self) -> dict | None:
        return None if self._sender is None else self._sender.status()

    # ---- actor side
    def llm_kwargs(self) -> dict:
        from actors.transport.vllm_engine import BACKEND, register

        register()                   # in this process too: on CPU the worker runs in it
        return {"weight_transfer_config": {"backend": BACKEND}}

    def attach(self, actor_id: str, llm, keepalive: Callable[[], None] | None = None) -> None:
        if self.address is None:
            raise WeightTransferError(
                f"{actor_id}: the collective transport has no hub address; give actors the transport "
                "the learner returns (Learner.actor_transport), not the driver's unbound one")
        from actors.transport.receiver import CollectiveReceiver

        workers = llm.llm_engine.vllm_config.parallel_config.world_size
        self._receiver = CollectiveReceiver(self.cfg, *self.address, actor_id, workers, keepalive)

    def poll(self, llm, have: int, published: tuple[int, str], force: bool = False) -> int:
        if self._receiver is None:
            raise WeightTransferError("poll before attach: the actor never registered with the learner's hub")
        loaded = self._receiver.poll(llm)
        return have if loaded is None else loaded

    def wait_for_send(self, timeout_s: float) -> bool:
        if self._receiver is None:
            raise WeightTransferError("wait_for_send before attach: the actor never registered with the learner's hub")
        return self._receiver.wait_for_send(timeout_s)

    @property
    def consistent(self) -> bool:
        return self._receiver is None or self._receiver.consistent

    def load_into(self, llm, location: str) -> None:
        """Poll until the version at ``location`` is loaded (a send that names this actor)."""
        want = parse_location_version(location)
        deadline = time.monotonic() + self.cfg.join_timeout_s + self.cfg.collective_timeout_s
        while self._receiver is None or self._receiver.version != want:
            if time.monotonic() > deadline:
                raise WeightTransferError(f"version {want} was not sent to this actor in time", ["learner rank 0"])
            if self.poll(llm, -1, (want, location)) == -1:
                time.sleep(0.05)
