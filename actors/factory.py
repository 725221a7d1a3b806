"""Create N generation actors with placement, start their loops, and fan control calls out."""

from __future__ import annotations

from typing import Any

import ray

from actors.config import ActorConfig
from actors.generation import GenerationActor
from actors.cluster import placement


def actor_name(run_id: str, index: int) -> str:
    return f"lagrl-gen-{run_id}-{index}"


def create_generation_actors(cfg: ActorConfig, run_id: str, redis_url: str, model_dir, *,
                             group_size: int, seed: int = 0, reward_scorer=None, count: int | None = None,
                             buffer_cfg=None, log_dir: str | None = None,
                             transport=None) -> list[ray.actor.ActorHandle]:
    """Actors are named (findable from a notebook or a fault test) and restarted by Ray on a crash;
    `run` is retried after a restart, so a restarted actor rejoins the loop by itself (Ray passes
    the same arguments again: ``transport``, the learner's ``actor_transport``, reaches it too).
    ``model_dir``: a path, or a ``actors.cluster.model_source.ModelSource`` (each actor resolves it on its
    node). Placement (``actors.cluster.placement``): ``cfg.resources`` and, on a cluster, off the driver's node."""
    where = placement.actor_options(cfg.resources, cfg.avoid_driver_node)
    handles = []
    for i in range(cfg.num_actors if count is None else count):
        name = actor_name(run_id, i)
        handles.append(GenerationActor.options(
            name=name, num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus * cfg.tensor_parallel_size,
            max_restarts=cfg.max_restarts, max_task_retries=-1, max_concurrency=4,
            runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kv_cache_gib),
                                      "TOKENIZERS_PARALLELISM": "false"}}, **where,
        ).remote(name, run_id, redis_url, model_dir, cfg, group_size=group_size, seed=seed, reward_scorer=reward_scorer,
                 buffer_cfg=buffer_cfg, log_dir=log_dir, transport=transport))
    return handles


def start_loops(actors: list[ray.actor.ActorHandle]) -> list[ray.ObjectRef]:
    """Start every actor's `run()`; the refs resolve (with final status) after `stop`."""
    return [a.run.remote() for a in actors]


def fan_out(actors: list[ray.actor.ActorHandle], method: str, *args: Any, timeout: float | None = None) -> list:
    """Call `method(*args)` on every actor and wait for all results."""
    return ray.get([getattr(a, method).remote(*args) for a in actors], timeout=timeout)


def wait_started(actors: list[ray.actor.ActorHandle], cfg: ActorConfig, run_id: str, log=print) -> dict[str, dict]:
    """Block until every actor's constructor finished (engine built, model loaded); actor name ->
    where it runs (``actors.cluster.placement.locate``). Says every minute what a still unplaced actor
    needs; raises naming the actor when one failed to start (e.g. its model is not reachable)."""
    refs = {actor_name(run_id, i): placement.where_ref(a) for i, a in enumerate(actors)}
    selector = placement.off_driver_selector(cfg.avoid_driver_node)
    needs = placement.describe_needs(cfg.resources, selector, cfg.num_cpus, cfg.num_gpus * cfg.tensor_parallel_size)
    return placement.with_node_names(placement.wait_started(refs, lambda pending: f"each needs {needs}", log=log))
