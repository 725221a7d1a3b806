"""How new policy weights travel from the learner to the generation actors (DESIGN.md §8).

The interface only: no Ray or vLLM import here, so the learner and the driver depend on this
module and never on a concrete transport. Implementations live beside it, one module each, named
with their capabilities in the registry (``actors.transport.registry``) and imported by name when
:func:`make_transport` builds one:

- ``object_store`` (``ray``): tensors go into Ray's object store and a small named actor keeps
  references to the latest versions; an actor hands the version it fetched to its engine through
  one shared-memory file (``shm``).
- ``collective``: learner rank 0 and every engine worker form one group and each version is one
  ordered set of bucketed broadcasts (NCCL on CUDA, gloo on CPU, through the same code).

Protocol of one version v (every learner-side call runs on every learner rank, in the same
order: under ZeRO-3 reading the weights gathers them, which is a collective):

    learner:      location = transport.publish(weights, v)        # rank 0's answer is used
    coordinator:  buffer.publish_version(v, location)              # (version, location) atomically
    learner:      outcome = transport.after_announce(weights)      # a collective broadcasts here;
                                                                   # repeated while outcome["retry"]
    actor:        between engine steps: version = transport.poll(llm, version, buffer.get_version())

A *location* is a string ending in ``/<version>``.

Into the engine, every implementation goes through lagrl's backends for vLLM's weight-transfer API
(``vllm_engine``), never through tensors passed to ``collective_rpc``: the engine core may run in
its own process (``ActorConfig.engine_process``; always on GPU), and vLLM's IPC does not carry
tensors as RPC arguments.
Older versions (fixed-lag mode, ``LearnerConfig.fixed_lag`` = k >= 1: actors sample step s with
version s - k while the learner publishes s): a transport that can serve them keeps the newest
``keep`` versions and names any of them with ``location_for(version)``; the actor loads one with
``load_into(llm, location_for(v))``. Which transports can is their registry entry's
``serves_older_versions`` (the object store: its store actor keeps references to the last ``keep``
snapshots; not the collective, which broadcasts only the newest version); :func:`transport_for`
refuses the others for k >= 1.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

from actors.transport import registry

if TYPE_CHECKING:
    import torch

NamedTensors = list[tuple[str, "torch.Tensor"]]


class WeightTransferError(RuntimeError):
    """A weight transfer that did not reach every member; the message names the missing ones."""

    def __init__(self, what: str, missing: list[str] | None = None, detail: str = ""):
        self.missing = list(missing or [])
        text = what + (f": missing {', '.join(self.missing)}" if self.missing else "")
        super().__init__(text + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class ParamMeta:
    """One parameter as the transport plans it: HF name, dtype name (``"bfloat16"``), full shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        import torch

        n = getattr(torch, self.dtype).itemsize
        for s in self.shape:
            n *= s
        return n


class WeightSource(Protocol):
    """The learner's current weights as a transport reads them, on one learner rank.

    ``collective``: reading tensors is a collective (ZeRO-3 gathers), so every rank must call
    :meth:`buckets` with the same plan and iterate it to the end, whatever it does with them.
    """

    rank: int
    collective: bool

    def metadata(self) -> list[ParamMeta]:
        """Every parameter's name, dtype and full shape, in a fixed order (no gather)."""

    def buckets(self, plan: list[list[ParamMeta]]) -> Iterator[NamedTensors]:
        """The full tensors of each bucket of ``plan``, one bucket at a time (valid until the next)."""


class TensorListSource:
    """A :class:`WeightSource` over plain (name, tensor) pairs in one process (tests, tools)."""

    collective = False

    def __init__(self, params: Iterable[tuple[str, "torch.Tensor"]], rank: int = 0):
        self.rank = rank
        self._params = dict(params)

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in self._params.items()]

    def buckets(self, plan: list[list[ParamMeta]]) -> Iterator[NamedTensors]:
        for bucket in plan:
            yield [(m.name, self._params[m.name].detach()) for m in bucket]


def as_source(weights) -> WeightSource:
    """A WeightSource as it is, or plain (name, tensor) pairs wrapped in one."""
    return weights if hasattr(weights, "buckets") else TensorListSource(weights)


class WeightTransport(Protocol):
    """One transport, both halves. It is pickled to the learner ranks and to every actor."""

    upkeep_s: float | None   # how often the learner calls ``after_announce(catch_up=True)`` while
                             # waiting for data when ``learner_status()["pending"]`` (None: never)
    pushes: bool             # True: the learner sends each version to the actors (they wait for the
                             # send); False: an actor fetches a published version itself

    # ---- learner side (every rank)
    def bind_learner(self, rank: int, host: str, device: str) -> WeightTransport:
        """Once per rank when the learner starts; rank 0's answer is what the actors must get."""

    def publish(self, weights: WeightSource | Iterable[tuple[str, torch.Tensor]], version: int) -> str | None:
        """Make ``weights`` available as ``version``; rank 0 returns the location actors load from."""

    def after_announce(self, weights: WeightSource, catch_up: bool = False) -> dict | None:
        """Once the version is visible in the buffer (a collective broadcasts here). Rank 0 returns
        ``{"retry": bool, "events": [str], ...}``; ``catch_up`` re-sends the published version to
        the actors that lack it."""

    def learner_status(self) -> dict | None:
        """Rank 0: ``{"live": [actor ids], "pending": bool}`` (None: no membership to track)."""

    # ---- actor side
    def llm_kwargs(self) -> dict[str, Any]:
        """Extra ``vllm.LLM`` arguments the engine needs for this transport."""

    def attach(self, actor_id: str, llm, keepalive: Callable[[], None] | None = None) -> None:
        """Once the actor's engine is built (a restarted actor attaches again)."""

    def poll(self, llm, have: int, published: tuple[int, str], force: bool = False) -> int:
        """Between engine steps: load what is due; returns the version the engine now holds."""

    def wait_for_send(self, timeout_s: float) -> bool:
        """A pushing transport, an idle actor whose published version is not loaded yet: block until
        the learner announces a send (True: poll now), at most ``timeout_s`` (False)."""

    @property
    def consistent(self) -> bool:
        """False while the engine holds a partly loaded version: it must not sample until a poll
        completes a load."""

    def load_into(self, llm, location: str) -> None:
        """Load the weights at ``location`` into a running vLLM engine (tests, explicit syncs)."""


def parse_location_version(location: str) -> int:
    """The version encoded at the end of a location string."""
    try:
        return int(location.rstrip("/").rpartition("/")[2])
    except ValueError:
        raise ValueError(f"weight location {location!r} does not end in /<version>") from None


def make_transport(kind: str, run_id: str, **kwargs) -> WeightTransport:
    """The transport registered as ``kind`` (an alias too; ``kwargs`` go to its constructor)."""
    module, _, name = registry.entry(kind).impl.partition(":")
    return getattr(importlib.import_module(module), name)(run_id, **kwargs)


def transport_for(actors_cfg, run_id: str, keep_versions: int = 1) -> WeightTransport:
    """The transport an ``ActorConfig`` names, with its settings (what the driver builds; 'auto' must have
    been resolved: ``launch.config.layout.resolved_actors``, or ``ActorConfig.transport_or_default``).

    ``keep_versions``: how many of the newest versions actors must be able to load (k + 1 for a
    fixed lag k, ``LearnerConfig.versions_needed``); more than 1 needs a transport that serves older
    versions (its registry entry's ``serves_older_versions``)."""
    kind = registry.canonical(actors_cfg.weight_transport)
    problems = registry.refusals(kind, versions=keep_versions)
    if problems:
        raise ValueError("; ".join(problems))
    entry = registry.TRANSPORTS[kind]
    kwargs: dict[str, Any] = {}
    if entry.serves_older_versions:
        kwargs["keep"] = max(2, keep_versions)
    if entry.settings is not None:
        kwargs["cfg"] = getattr(actors_cfg, entry.settings)
    return make_transport(kind, run_id, **kwargs)


def serves_older_versions(transport) -> bool:
    """Whether actors can load a version older than the newest from this transport (``location_for``)."""
    return callable(getattr(transport, "location_for", None))


def check_serves_versions(transport, versions: int) -> None:
    """Raise (naming the fix) unless ``transport`` lets actors load each of the newest ``versions``."""
    if versions <= 1:
        return
    if not serves_older_versions(transport):
        raise ValueError(f"{type(transport).__name__} cannot serve a version older than the newest one, and "
                         f"learner.fixed_lag samples with versions up to {versions - 1} behind: use "
                         f"{registry.older_versions_fix()}")
    if getattr(transport, "keep", 0) < versions:
        raise ValueError(f"the weight transport keeps {getattr(transport, 'keep', 0)} versions, learner.fixed_lag "
                         f"needs the newest {versions}: build it with transport_for(..., keep_versions={versions})")
