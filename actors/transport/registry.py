"""The registry of weight transports: each one's name, where its code lives and what it can do.

Names, ``"module:Class"`` strings and capabilities only, nothing imported (no Ray, no vLLM): the actor
config takes its choices from here, the layout (``launch.config.layout``) judges a placement by the
capabilities, ``actors.transport.transport_for`` builds an entry's class by name, the smoke lists the
transports a device allows. Every rule about which transport fits a run is read from an entry here:

- :func:`refusals`: why a kind cannot serve a placement / a fixed lag (each names the fix);
- :func:`auto_kind`: the one place ``weight_transport: auto`` is resolved.

Adding a transport: a module in ``actors/transport/`` implementing ``WeightTransport`` and one entry in
:data:`TRANSPORTS`. One with settings of its own also adds their model to ``actors/transport/config.py``
and a field of that name to ``ActorConfig`` (``settings`` below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# where the weights travel (learner rank 0 -> every engine), as the layout resolved the placement
CPU = "cpu"                 # learner and engines on CPU
OWN_GPUS = "own_gpus"       # learner rank 0 and every engine on a GPU of its own
SHARED_GPU = "shared_gpu"   # some GPU holds two of them (fractional GPUs)
MIXED = "mixed"             # one side on CPU, the other on GPU
UNPLACED = "unplaced"       # no placement known: an actor built without the driver, from its own settings
PLACEMENTS = (CPU, OWN_GPUS, SHARED_GPU, MIXED, UNPLACED)
DEVICES = frozenset({"cpu", "cuda"})


@dataclass(frozen=True)
class TransportEntry:
    """One weight transport. Its class is built as ``Class(run_id, keep=...)`` when it serves older
    versions and ``Class(run_id, cfg=<its settings>)`` when it has settings (``transport_for``)."""

    impl: str                               # "module:Class" implementing actors.transport.WeightTransport
    title: str                              # what it is, for the console ("the Ray object store")
    help: str                               # one line for ActorConfig.weight_transport's description
    serves_older_versions: bool             # keeps the newest `keep` versions, each named by location_for
                                            # (fixed lag k >= 1 samples with versions up to k behind)
    devices: frozenset[str] = DEVICES       # where learner rank 0 and the engines may be ("cpu", "cuda")
    shares_a_gpu: bool = True               # may run with a learner rank and engines on one GPU
    needs_shared_gpu: bool = False          # only where the engines sit on learner rank 0's GPU
    auto_on: frozenset[str] = frozenset()   # PLACEMENTS on which `auto` prefers it (in registry order)
    aliases: tuple[str, ...] = ()           # other names the config accepts for it
    settings: str | None = None             # the ActorConfig field holding its settings (None: none)
    picks_backend: bool = False             # its settings' `backend` ('auto' | 'gloo' | 'nccl') is made
                                            # concrete by the layout: nccl where every member has a GPU of
                                            # its own, else gloo


TRANSPORTS: dict[str, TransportEntry] = {
    "ray": TransportEntry(
        impl="actors.transport.object_store:RayObjectStoreTransport", title="the Ray object store",
        help="the Ray object store (CPU, multi-node, small models; keeps older versions for a fixed lag)",
        serves_older_versions=True, auto_on=frozenset({CPU, UNPLACED})),
    "cuda_ipc": TransportEntry(
        impl="actors.transport.cuda_ipc:CudaIpcTransport", title="CUDA IPC handles on the shared GPU",
        help="CUDA IPC: the engines load each version from learner rank 0's staging buffer on the GPU they share "
             "(no copy through host memory; the newest version only; one GPU)",
        serves_older_versions=False, devices=frozenset({"cuda"}), needs_shared_gpu=True,
        auto_on=frozenset({SHARED_GPU})),
    "collective": TransportEntry(
        impl="actors.transport.collective:CollectiveTransport", title="a collective broadcast",
        help="a collective broadcast from learner rank 0 into every engine (NCCL on GPU, gloo on CPU or a "
             "shared GPU; the newest version only)",
        serves_older_versions=False, auto_on=frozenset({OWN_GPUS, SHARED_GPU, MIXED}), aliases=("nccl",),
        settings="collective", picks_backend=True),
}

TransportName = Literal[tuple(TRANSPORTS)]              # the registered names
TransportKind = Literal[("auto", *TRANSPORTS)]          # the config's type: auto or a registered name


@dataclass(frozen=True)
class Where:
    """Where learner rank 0 and the engines sit ("cpu" | "cuda"; None: not known yet, e.g. a learner left
    at device 'auto' before the cluster is seen), whether some GPU holds two of them, and how many GPUs
    the cluster has."""

    learner: str | None
    engines: str | None
    shared_gpu: bool = False
    gpus: float | None = None       # the cluster's GPUs (None: not known yet)

    @property
    def placement(self) -> str:
        if self.shared_gpu:
            return SHARED_GPU
        if self.learner is None or self.engines is None:
            return UNPLACED
        if self.learner != self.engines:
            return MIXED
        return CPU if self.learner == "cpu" else OWN_GPUS


def aliases() -> dict[str, str]:
    return {alias: name for name, entry in TRANSPORTS.items() for alias in entry.aliases}


def known(allow_auto: bool = True) -> str:
    """The accepted values, for error messages: ``auto, ray, collective (nccl = collective)``."""
    alias = ", ".join(f"{a} = {n}" for a, n in aliases().items())
    return ", ".join(["auto"] * allow_auto + list(TRANSPORTS)) + (f" ({alias})" if alias else "")


def canonical(kind: str, allow_auto: bool = False) -> str:
    """The registered name ``kind`` means (an alias resolved; 'auto' kept when allowed); ValueError naming
    the known ones."""
    kind = aliases().get(kind, kind)
    if kind in TRANSPORTS or (allow_auto and kind == "auto"):
        return kind
    if kind == "auto":
        raise ValueError("weight transport 'auto' is resolved from the placement first "
                         "(launch.config.layout.choose_transport, or ActorConfig.transport_or_default)")
    raise ValueError(f"unknown weight transport {kind!r}; choose from {known(allow_auto)}")


def entry(kind: str) -> TransportEntry:
    return TRANSPORTS[canonical(kind)]


def backend_asked(actors_cfg) -> str | None:
    """The backend an ``ActorConfig``'s explicitly chosen transport asks for in its settings (None: 'auto',
    or a transport without a backend)."""
    if actors_cfg.weight_transport == "auto":
        return None
    e = entry(actors_cfg.weight_transport)
    return getattr(actors_cfg, e.settings).backend if e.picks_backend else None


def _unfit(e: TransportEntry, kind: str, where: Where | None, versions: int) -> list[str]:
    """What of the run ``e`` cannot serve, in words (no fix)."""
    out = []
    if versions > 1 and not e.serves_older_versions:
        out.append(f"the {kind} weight transport serves only the newest version, and learner.fixed_lag samples "
                   f"with versions up to {versions - 1} behind it")
    if where is None:
        return out
    for side, device in (("learner", where.learner), ("engines", where.engines)):
        if device is not None and device not in e.devices:
            out.append(f"the {kind} weight transport runs on {'/'.join(sorted(e.devices))}, the {side} on {device}")
    if where.shared_gpu and not e.shares_a_gpu:
        out.append(f"the {kind} weight transport cannot run with the learner and engines sharing a GPU")
    if e.needs_shared_gpu and not where.shared_gpu and where.learner is not None and where.engines is not None:
        out.append(f"the {kind} weight transport hands GPU memory over in place: the engines must share learner "
                   "rank 0's GPU (fractional --learner.gpus_per_rank and --actors.num_gpus)")
    if e.needs_shared_gpu and where.gpus is not None and where.gpus > 1:
        out.append(f"the {kind} weight transport needs every engine on learner rank 0's GPU, and with "
                   f"{where.gpus:g} GPUs the fractions may put them on others")
    return out


def fitting(where: Where | None = None, versions: int = 1) -> list[str]:
    """The registered kinds that can serve ``where`` and the newest ``versions`` versions, in registry order."""
    return [k for k, e in TRANSPORTS.items() if not _unfit(e, k, where, versions)]


def refusals(kind: str, where: Where | None = None, versions: int = 1) -> list[str]:
    """Why ``kind`` cannot serve a run placed at ``where`` (None: not known) that samples with the newest
    ``versions`` versions (a fixed lag k: k + 1), each naming the fix; [] when it can."""
    kind = canonical(kind)
    problems = _unfit(TRANSPORTS[kind], kind, where, versions)
    if not problems:
        return []
    other = [k for k in fitting(where, versions) if k != kind]
    fix = (f"use --actors.weight_transport {' or '.join(other)}" if other else
           "no registered weight transport fits this placement; change the placement")
    return [f"{p}: {fix}" for p in problems]


def older_versions_fix() -> str:
    """The flag that picks a transport serving older versions (for messages about a fixed lag)."""
    kinds = [k for k, e in TRANSPORTS.items() if e.serves_older_versions]
    return f"--actors.weight_transport {' or '.join(kinds)}" if kinds else "a transport keeping older versions"


def auto_kind(where: Where | None, versions: int = 1) -> str:
    """The kind ``weight_transport: auto`` stands for at ``where`` (None: no placement known) when the run
    samples with the newest ``versions`` versions: the first kind that fits and prefers this placement
    (``auto_on``), else the first that fits."""
    fits = fitting(where, versions)
    if not fits:
        raise ValueError(f"no registered weight transport fits (placement {where}, {versions} versions); "
                         f"registered: {known()}")
    place = UNPLACED if where is None else where.placement
    return next((k for k in fits if place in TRANSPORTS[k].auto_on), fits[0])
