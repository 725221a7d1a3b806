"""Where the learner and the engines sit on GPUs, which weight transport fits, and what cannot work.

The one-GPU layout: a learner rank and one or more engines share a GPU through fractional Ray GPU
resources (``learner.gpus_per_rank``, ``actors.num_gpus``). Ray packs fractional requests so that
the fractions on one GPU add up to at most 1, and each process keeps its memory within its
fraction (a learner rank caps its allocator at ``learner.memory_fraction()``, an engine asks vLLM
for ``gpu_memory_utilization`` <= ``num_gpus``), so the memory of everything on a GPU fits in it.
A whole-GPU request (1) always gets a GPU of its own.

Two kinds of checks, each naming the fix:

- :func:`config_problems`: the config alone (run from ``RunConfig``'s validator, so ``--print-config``
  and presets fail at once); the per-component ones live in ``ActorConfig`` and ``LearnerConfig``;
- :func:`cluster_problems`: against the Ray cluster's GPU count (the driver, before any actor starts).

:func:`choose_transport` resolves ``actors.weight_transport: auto`` (and a collective backend
'auto') from the placement and says why. Which transport fits a placement, and which one ``auto``
prefers there, is each transport's registry entry (``actors.transport.registry``: ``refusals`` and
``auto_kind`` read the capabilities); with the transports registered today:

- learner and engines on CPU: ``ray`` (the object store);
- learner and engines sharing a GPU (any fraction below 1): ``collective`` over gloo: NCCL cannot
  run two ranks on one GPU; gloo broadcasts buckets staged through host memory;
- learner and engines on GPUs of their own: ``collective`` over NCCL;
- one side on CPU, the other on GPU: ``collective`` over gloo (NCCL needs CUDA on every member);
- a fixed lag (``learner.fixed_lag`` >= 1) on any placement: ``ray``, the one that keeps older versions.

Pure functions over the configs (no Ray import): unit-tested without a cluster. They read a run's
``learner`` and ``actors`` only (:class:`Placement`, which ``RunConfig`` is), so this module does not
import ``launch.config``, whose validator calls :func:`config_problems`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from actors.transport import registry
from actors.transport.registry import Where

if TYPE_CHECKING:
    from actors.config import ActorConfig
    from learner.trainer_config import LearnerConfig


class Placement(Protocol):
    """What the layout reads of a run's config (``launch.config.RunConfig`` is one)."""

    learner: LearnerConfig
    actors: ActorConfig


class LayoutError(ValueError):
    """A GPU layout the Ray cluster cannot hold; the message names the fix (the CLI prints it, no traceback)."""


@dataclass(frozen=True)
class TransportChoice:
    """The weight transport a run uses: kind (a registered name), the collective backend ('gloo' /
    'nccl'; None for a transport without one, like ray) and the reason, for the console."""

    kind: str
    backend: str | None
    reason: str

    def line(self) -> str:
        what = self.kind if self.backend is None else f"{self.kind} ({self.backend})"
        return f"[driver] weight transport: {what}: {self.reason}"


def learner_device(learner: LearnerConfig, cluster_gpus: float | None) -> str:
    """'cuda' or 'cpu' as the rank group resolves it: 'auto' is cuda when the cluster has GPUs
    (``cluster_gpus`` None: unknown, taken as none)."""
    if learner.device != "auto":
        return learner.device
    return "cuda" if cluster_gpus else "cpu"


def engines_on_gpu(actors: ActorConfig) -> bool:
    return actors.num_gpus > 0


def shares_gpu(learner: LearnerConfig, actors: ActorConfig, device: str) -> bool:
    """Some GPU may hold more than one process of the group the weights travel in (learner rank 0
    and every engine): a fraction below 1 on either side, with both on GPUs."""
    return device == "cuda" and engines_on_gpu(actors) and (learner.shares_gpu or actors.shares_gpu)


def where(learner: LearnerConfig, actors: ActorConfig, device: str | None, cluster_gpus: float | None = None) -> Where:
    """Learner rank 0 and the engines as the transport registry judges them (``device`` None: the learner's
    is not known yet, and a shared GPU is assumed wherever fractions could put two on one)."""
    shared = (shares_gpu(learner, actors, device) if device is not None else
              engines_on_gpu(actors) and (learner.shares_gpu or actors.shares_gpu))
    return Where(device, "cuda" if engines_on_gpu(actors) else "cpu", shared, cluster_gpus)


def _share_desc(learner: LearnerConfig, actors: ActorConfig) -> str:
    return f"learner.gpus_per_rank {learner.gpus_per_rank:g}, actors.num_gpus {actors.num_gpus:g}"


def config_problems(cfg: Placement) -> list[str]:
    """Refusals that need both the learner's and the actors' settings (the config alone): an explicit
    transport that cannot serve the run (``registry.refusals``: a fixed lag, devices, a shared GPU), and
    NCCL where it cannot run. A learner left at device 'auto' is judged as if on CUDA wherever that is
    what would break."""
    learner, actors = cfg.learner, cfg.actors
    problems = []
    if actors.weight_transport != "auto":
        known = where(learner, actors, None if learner.device == "auto" else learner.device)
        problems += registry.refusals(actors.weight_transport, known, learner.versions_needed)
    if learner.device == "cpu" or not engines_on_gpu(actors):
        gpu_pair = False
    else:
        gpu_pair = learner.shares_gpu or actors.shares_gpu
    nccl = registry.backend_asked(actors) == "nccl"
    if gpu_pair and nccl:
        problems.append(f"actors.collective.backend=nccl while learner and engines may share a GPU "
                        f"({_share_desc(learner, actors)}): NCCL cannot run two ranks on one GPU; use "
                        "--actors.collective.backend gloo (or --actors.weight_transport auto)")
    if nccl and (learner.device == "cpu" or not engines_on_gpu(actors)):
        side = "learner.device=cpu" if learner.device == "cpu" else "actors.num_gpus=0 (engines on CPU)"
        problems.append(f"actors.collective.backend=nccl with {side}: NCCL needs CUDA on every member; use "
                        "--actors.collective.backend gloo (or auto)")
    return problems


def gpus_needed(learner: LearnerConfig, actors: ActorConfig, device: str) -> int:
    """Fewest GPUs the learner ranks and engines fit on: whole requests one GPU each (rounded up),
    fractions packed (their sum rounded up)."""
    requests = ([learner.gpus_per_rank] * learner.num_ranks if device == "cuda" else []) + \
        ([actors.num_gpus * actors.tensor_parallel_size] * actors.num_actors if engines_on_gpu(actors) else [])
    whole = sum(math.ceil(r - 1e-9) for r in requests if r >= 1)
    fractions = sum(r for r in requests if r < 1)
    return whole + math.ceil(fractions - 1e-9)


def one_gpu_share(num_actors: int) -> float:
    """An equal GPU fraction for one learner rank and ``num_actors`` engines on one GPU (2 decimals, down)."""
    return math.floor(100 / (num_actors + 1)) / 100


def one_gpu_fix(num_actors: int) -> str:
    share = one_gpu_share(num_actors)
    return (f"--learner.gpus_per_rank {share:g} --actors.num_gpus {share:g} --actors.gpu_memory_utilization "
            f"{share:g} (learner.num_ranks 1)")


def cluster_problems(cfg: Placement, cluster_gpus: float) -> list[str]:
    """Refusals that need the Ray cluster's GPU count (the driver, before actors start)."""
    learner, actors = cfg.learner, cfg.actors
    device = learner_device(learner, cluster_gpus)
    problems = []
    if device == "cuda" and not cluster_gpus:
        problems.append("learner.device=cuda but the Ray cluster has no GPU: use --learner.device auto (or cpu)")
    if engines_on_gpu(actors) and not cluster_gpus:
        problems.append(f"actors.num_gpus={actors.num_gpus:g} but the Ray cluster has no GPU: the engines would "
                        "never be placed; use --actors.num_gpus 0 on CPU")
    if problems:
        return problems
    needed = gpus_needed(learner, actors, device)
    if needed > cluster_gpus:
        fix = (f"to share one GPU: {one_gpu_fix(actors.num_actors)}" if cluster_gpus == 1
               else "fewer actors or ranks, or fractional GPUs (--learner.gpus_per_rank, --actors.num_gpus)")
        problems.append(f"the learner ({learner.num_ranks} rank(s) x {learner.gpus_per_rank:g} GPU"
                        f"{'' if device == 'cuda' else ', on CPU'}) and {actors.num_actors} engine(s) x "
                        f"{actors.num_gpus * actors.tensor_parallel_size:g} GPU need {needed} GPU(s), the cluster "
                        f"has {cluster_gpus:g}: {fix}")
    if actors.weight_transport != "auto":      # the learner's device is known now
        problems += registry.refusals(actors.weight_transport, where(learner, actors, device, cluster_gpus),
                                      learner.versions_needed)
    return problems


def nccl_fits(learner: LearnerConfig, actors: ActorConfig, device: str) -> bool:
    """Learner rank 0 and every engine each on a GPU of its own (what NCCL needs)."""
    return device == "cuda" and engines_on_gpu(actors) and not shares_gpu(learner, actors, device)


def choose_transport(cfg: Placement, cluster_gpus: float) -> TransportChoice:
    """The transport and collective backend for this placement (``auto`` resolved by the registry's
    ``auto_kind``; an explicit kind kept, with its backend made concrete)."""
    learner, actors = cfg.learner, cfg.actors
    device = learner_device(learner, cluster_gpus)
    at = where(learner, actors, device, cluster_gpus)
    kind = actors.weight_transport
    if kind == "auto":
        kind = registry.auto_kind(at, learner.versions_needed)
    entry = registry.entry(kind)
    backend = None
    if entry.picks_backend:
        backend = getattr(actors, entry.settings).backend
        if backend == "auto":
            backend = "nccl" if nccl_fits(learner, actors, device) else "gloo"
    if actors.weight_transport != "auto":
        return TransportChoice(kind, backend, f"asked for (--actors.weight_transport {kind}); "
                                              f"{_where_text(cfg, at)}: {_what(entry, backend, at)}")
    if learner.versions_needed > 1:
        only = "only " if sum(e.serves_older_versions for e in registry.TRANSPORTS.values()) == 1 else ""
        return TransportChoice(kind, backend, f"auto: learner.fixed_lag {learner.fixed_lag} samples with older "
                                              f"versions, which {only}{entry.title} keeps")
    return TransportChoice(kind, backend, f"auto: {_where_text(cfg, at)}: {_what(entry, backend, at)}")


def _where_text(cfg: Placement, at: Where) -> str:
    if at.shared_gpu:
        return f"learner and engines share a GPU ({_share_desc(cfg.learner, cfg.actors)})"
    if at.learner == at.engines:
        return "learner and engines on CPU" if at.learner == "cpu" else "learner and engines on GPUs of their own"
    learner, engines = ("GPU" if device == "cuda" else "CPU" for device in (at.learner, at.engines))
    return f"learner on {learner}, engines on {engines}"


def _what(entry: registry.TransportEntry, backend: str | None, at: Where) -> str:
    """How the weights travel: the transport, or for one with a backend, the backend and why."""
    if backend is None:
        return entry.title
    if backend == "nccl":
        return "NCCL broadcast"
    if at.shared_gpu:
        return "NCCL cannot run two ranks on one GPU, gloo broadcasts buckets through host memory"
    return "gloo through host memory"


def engines_start_early(cfg: Placement, cluster_gpus: float, transport_has_membership: bool) -> bool:
    """Whether the engines may build while the learner ranks set up: the transport keeps no membership
    (the object store: an actor needs nothing of the learner's engines) and no GPU is shared (vLLM
    sizes its KV cache from the free memory it measures, which the learner's model load would change
    under it)."""
    device = learner_device(cfg.learner, cluster_gpus)
    return not transport_has_membership and not shares_gpu(cfg.learner, cfg.actors, device)


def resolved_actors(cfg: Placement, choice: TransportChoice) -> ActorConfig:
    """``cfg.actors`` with the chosen transport (and backend) written in, as actors and config.json get it."""
    update: dict = {"weight_transport": choice.kind}
    if choice.backend is not None:
        field = registry.entry(choice.kind).settings
        update[field] = getattr(cfg.actors, field).model_copy(update={"backend": choice.backend})
    return cfg.actors.model_copy(update=update)
