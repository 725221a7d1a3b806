"""Where generation actors and learner ranks run on a Ray cluster, and a record of where they ran.

Two rules place a process (both from the config, applied by ``actors.factory`` and
``learner.rank_actor``):

- custom resources (``actors.resources``, ``learner.resources``, e.g. ``{"gen": 1}``): only
  nodes started with them (``ray start --resources '{"gen": 2}'``) can take the process;
- off the driver's node (``avoid_driver_node``, on by default): in a cluster of several alive
  nodes, a label selector ``ray.io/node-id != <driver's node>`` keeps actors and ranks away from
  the node the driver runs on. A single-node Ray (the local default) is unaffected.

A process that cannot be placed would wait forever without a word: :func:`wait_started` says
every ``warn_every_s`` what it waits for and what the cluster has free, and turns a failed
constructor (e.g. a model that is not on the node) into an error naming the process.

:func:`locate` asks each started actor where it runs (node id, name, IP, pid, the model
directory it opened); the driver writes that to ``placement.json`` in the run directory.

No Ray import at module level: configs import ``CustomResources`` from here.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Callable

from pydantic import AfterValidator

NODE_ID_LABEL = "ray.io/node-id"
BUILTIN_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}
MAX_CUSTOM_RESOURCES = 8
MAX_AMOUNT = 10_000.0


def check_custom_resources(value: dict[str, float]) -> dict[str, float]:
    """Names and amounts Ray accepts; CPUs and GPUs have fields of their own."""
    if len(value) > MAX_CUSTOM_RESOURCES:
        raise ValueError(f"at most {MAX_CUSTOM_RESOURCES} custom resources, got {len(value)}")
    for name, amount in value.items():
        if not name or name in BUILTIN_RESOURCES or name.startswith("node:"):
            raise ValueError(f"{name!r} is not a custom resource (CPU/GPU/memory have their own fields; "
                             "node:<ip> is Ray's)")
        if not 0 < amount <= MAX_AMOUNT:
            raise ValueError(f"resource {name!r}: amount {amount} not in (0, {MAX_AMOUNT:g}]")
        if amount > 1 and amount != int(amount):
            raise ValueError(f"resource {name!r}: Ray needs whole amounts above 1, got {amount}")
    return value


CustomResources = Annotated[dict[str, float], AfterValidator(check_custom_resources)]


# --- placement ---------------------------------------------------------------------------------------
def this_node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def alive_nodes() -> list[dict]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def off_driver_selector(avoid_driver_node: bool) -> dict[str, str] | None:
    """The label selector that keeps a process off this (the driver's) node, when it applies."""
    if not avoid_driver_node or len(alive_nodes()) < 2:
        return None
    return {NODE_ID_LABEL: f"!{this_node_id()}"}


def actor_options(resources: dict[str, float], avoid_driver_node: bool) -> dict[str, Any]:
    """``.options(...)`` arguments placing one actor: its custom resources and the node rule."""
    options: dict[str, Any] = {}
    if resources:
        options["resources"] = dict(resources)
    selector = off_driver_selector(avoid_driver_node)
    if selector:
        options["label_selector"] = selector
    return options


def describe_needs(resources: dict[str, float], selector: dict[str, str] | None, cpus: float, gpus: float) -> str:
    need = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **resources}
    where = " on any node but the driver's" if selector else ""
    return f"{need}{where}"


def free_resources_line() -> str:
    """Each alive node's name and resources, and what is free in the whole cluster now."""
    import ray

    def shown(res: dict) -> dict:
        return {k: v for k, v in res.items() if not k.startswith(("node:", "accelerator_type"))
                and k not in ("memory", "object_store_memory")}

    nodes = "; ".join(f"{n.get('NodeName') or n['NodeManagerAddress']} {shown(n.get('Resources', {}))}"
                      for n in alive_nodes())
    return f"nodes: {nodes}; free now: {shown(ray.available_resources())}"


def wait_started(refs: dict[str, Any], what: Callable[[list[str]], str], *, warn_every_s: float = 60.0,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Results of ``refs`` (name -> ObjectRef of a first call on each process), waiting as long as
    it takes; every ``warn_every_s`` a line says who is still waiting and ``what(names)`` they need.
    A process that failed to start raises RuntimeError naming it, with Ray's error (and its cause)."""
    import ray

    pending, results, started, last = dict(refs), {}, time.monotonic(), time.monotonic()
    by_ref = {ref: name for name, ref in refs.items()}
    while pending:
        ready, _ = ray.wait(list(pending.values()), num_returns=len(pending), timeout=min(warn_every_s, 5.0))
        for ref in ready:
            name = by_ref[ref]
            try:
                results[name] = ray.get(ref)
            except Exception as exc:      # the constructor raised, or the process died while starting
                raise RuntimeError(f"{name} failed to start: {type(exc).__name__}: {exc}") from exc
            pending.pop(name)
        if pending and time.monotonic() - last >= warn_every_s:
            last = time.monotonic()
            # Ray does not tell a process still in its constructor (an engine loading) from one waiting
            # for resources: the free resources say which it can be
            log(f"[placement] {sorted(pending)} not ready after {last - started:.0f}s (still "
                f"starting, or waiting for resources: {what(sorted(pending))}); cluster: {free_resources_line()}")
    return results


# --- where things run --------------------------------------------------------------------------------
def _where(actor_self) -> dict:
    """Runs inside an actor (``__ray_call__``): its node, pid and the model directory it opened."""
    import os

    import ray

    model_dir = getattr(actor_self, "model_dir", None) or getattr(getattr(actor_self, "engine", None), "model_dir", None)
    return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
            "model_dir": None if model_dir is None else str(model_dir)}


def where_ref(handle):
    """An ObjectRef of ``handle``'s location (resolves once its constructor finished)."""
    return handle.__ray_call__.remote(_where)


def node_names() -> dict[str, dict]:
    """node id -> {"name", "ip"} for every node the cluster knows."""
    import ray

    return {n["NodeID"]: {"name": n.get("NodeName") or n["NodeManagerAddress"], "ip": n["NodeManagerAddress"]}
            for n in ray.nodes()}


def with_node_names(located: dict[str, dict]) -> dict[str, dict]:
    """Add the node's name and IP to each ``_where`` answer."""
    names = node_names()
    return {k: {**v, **names.get(v["node_id"], {"name": "?", "ip": "?"})} for k, v in located.items()}


def locate(handles: dict[str, Any]) -> dict[str, dict]:
    """name -> {"node_id", "name", "ip", "pid", "model_dir"} of started actors."""
    import ray

    refs = {k: where_ref(h) for k, h in handles.items()}
    return with_node_names(dict(zip(refs, ray.get(list(refs.values())))))


def driver_location() -> dict:
    import os

    node_id = this_node_id()
    return {"node_id": node_id, "pid": os.getpid(), **node_names().get(node_id, {"name": "?", "ip": "?"})}


def placement_line(placement: dict) -> str:
    """One console line: where the driver, each actor and each learner rank run."""
    def at(p: dict) -> str:
        return f"{p['name']} ({p['ip']}, {p['node_id'][:8]})"

    parts = [f"driver on {at(placement['driver'])}"]
    parts += [f"{name} on {at(p)}" for name, p in placement.get("actors", {}).items()]
    parts += [f"learner rank {r} on {at(p)}" for r, p in enumerate(placement.get("learner", []))]
    return "[driver] placement: " + "; ".join(parts)
