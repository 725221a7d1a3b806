"""What the driver does before the first step, one function each: the run directory, the data, Ray, the
GPU layout, the optimizer and placement records (``launch.run.driver`` calls them in its phases)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from actors.cluster.placement import driver_location, placement_line
from actors.cluster.priority import SYSTEM_CONFIG
from buffer.server import write_private
from launch.config import RunConfig
from launch.config.layout import LayoutError, choose_transport, cluster_problems, resolved_actors
from launch.config.redact import redact
from launch.worlds import world_data
from rewards.problems import load_problems
from rewards.scoring import resolve_kind
from rewards.spec_limits import SpecLimits


def make_run_dir(path: Path) -> Path:
    """The run directory, owner-only (0700, also when it exists already): it holds the files with the
    Redis password (config.json, redis_url.txt, redis.json) and everything the run writes."""
    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def resolve_data(cfg: RunConfig) -> tuple[str, str, str | None, str]:
    """(model dir, train path, eval path, prompt template when the tokenizer has no chat template)."""
    if cfg.world is not None:
        return world_data(cfg.world, cfg.data)
    if not cfg.data.model_dir or not cfg.data.train_path:
        raise ValueError("--data.model_dir (a Hugging Face model directory) and --data.train_path (a JSONL/"
                         "parquet of math problems) are required unless a world is chosen (--world, --tiny, ...)")
    return cfg.data.model_dir, cfg.data.train_path, cfg.data.eval_path, "{problem}\n"


def load_problem_set(cfg: RunConfig, path: str):
    # code test specs checked here, where a bad one is a row number: they travel in every buffer message
    limits = SpecLimits.of(cfg.rewards, cfg.buffer.max_message_bytes)
    return load_problems(path, cfg.data.prompt_key, cfg.data.answer_key, format=cfg.data.format,
                         bad_rows=cfg.data.bad_rows, code_sources=cfg.rewards.code_data_sources, limits=limits)


def has_code(cfg: RunConfig, *problem_sets) -> bool:
    """Whether any problem goes to the code sandbox (rewards.scoring's routing)."""
    return any(resolve_kind(p.answer, p.data_source, cfg=cfg.rewards) == "code"
               for problems in problem_sets if problems for p in problems)


def init_ray(cfg: RunConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    env = {"TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": str(cfg.actors.cpu_kv_cache_gib)}
    if os.environ.get("RAY_ADDRESS"):
        # Under `ray job submit` the job's own env_vars are already in our environment; Ray refuses to
        # merge a driver runtime_env that names the same keys, so the job's values win.
        env = {k: v for k, v in env.items() if k not in os.environ}
        ray.init(runtime_env={"env_vars": env} if env else None)
        return
    needed = cfg.actors.num_actors * cfg.actors.num_cpus + cfg.learner.num_ranks * cfg.learner.cpus_per_rank + 2
    # workers at nice 0, not Ray's 15: they are the run (actors.cluster.priority)
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, int(needed + 0.999)), include_dashboard=False,
             _node_ip_address="127.0.0.1", runtime_env={"env_vars": env}, resources=local_resources(cfg),
             _system_config=SYSTEM_CONFIG)


def local_resources(cfg: RunConfig) -> dict[str, float]:
    """The custom resources the config asks for (actors.resources, learner.resources), given to the
    local single-node Ray so a config written for a cluster also runs on one machine."""
    need: dict[str, float] = {}
    for per, count in ((cfg.actors.resources, cfg.actors.num_actors), (cfg.learner.resources, cfg.learner.num_ranks)):
        for name, amount in per.items():
            need[name] = need.get(name, 0.0) + amount * count
    return {k: float(int(v + 0.999)) for k, v in need.items()}


def resolve_layout(cfg: RunConfig) -> tuple[RunConfig, float]:
    """Refuse, before anything starts, a GPU layout the cluster cannot hold (naming the fix); write
    the weight transport (and collective backend) the placement calls for into the config and say
    which and why (launch.config.layout). Returns the config and the cluster's GPU count."""
    import ray


    gpus = float(ray.cluster_resources().get("GPU", 0))
    problems = cluster_problems(cfg, gpus)
    if problems:
        raise LayoutError("this GPU layout cannot run: " + "; ".join(problems))
    choice = choose_transport(cfg, gpus)
    print(choice.line(), flush=True)
    return cfg.model_copy(update={"actors": resolved_actors(cfg, choice)}), gpus


def record_optimizer(cfg: RunConfig, learner, run_path: Path, buffer) -> RunConfig:
    """The optimizer the learner ranks resolved (learner.optimizer), into the console, config.json and
    the run's meta."""
    print(f"[driver] optimizer: {learner.ranks.optimizer_label} (learner.optimizer {cfg.learner.optimizer})",
          flush=True)
    cfg = cfg.model_copy(update={"learner": cfg.learner.model_copy(update={"optimizer": learner.ranks.optimizer})})
    write_private(run_path / "config.json", cfg.model_dump_json(indent=2))
    buffer.set_meta(config=redact(cfg))
    return cfg


def record_resume(cfg: RunConfig, learner) -> None:
    """The console lines of a learner that resumed from a checkpoint (none for a fresh one)."""
    r = learner.resumed_from
    if not r:
        return
    print(f"[driver] resumed from {r['path']} at step {r['step']}, version {r['version']} "
          f"(buffer at {r['published']})", flush=True)
    if r.get("republished"):
        print(f"[driver] fixed lag {cfg.learner.fixed_lag}: versions {r['republished']} republished "
              "from the checkpoint for the prompts pinned to them", flush=True)


def record_placement(run_path: Path, buffer, actors: dict[str, dict], learner, model) -> None:
    """Where the driver, every actor and every learner rank run (and which model directory each
    opened): ``placement.json`` in the run directory, the run's meta, one console line when they
    span several nodes."""
    placement = {"driver": driver_location(), "actors": actors, "learner": learner.ranks.nodes,
                 "model": model.describe()}
    (run_path / "placement.json").write_text(json.dumps(placement, indent=1))
    buffer.set_meta(placement=placement)
    nodes = {placement["driver"]["node_id"], *(a["node_id"] for a in actors.values()),
             *(r["node_id"] for r in learner.ranks.nodes)}
    if len(nodes) > 1:          # on one machine the line says nothing (placement.json still records it)
        print(placement_line(placement), flush=True)
