"""The run driver: wires Ray, Redis, reward workers, generation actors, the learner and the feeder.

    python launch/onpolicy.py --tiny                         # local Ray + private redis-server
    RAY_ADDRESS=... REDIS_URL=... python launch/onpolicy.py --data.model_dir ... --data.train_path ...

Under `ray job submit` RAY_ADDRESS is set and the driver joins that cluster; run plainly it starts a
local Ray (no dashboard, token auth on: Ray 2.60 still registers the node IP and listens beyond
loopback, see README "Network exposure"). With no REDIS_URL it starts (or, after a crash, re-attaches to) a
private redis-server in the run directory. Everything it started is stopped on completion,
Ctrl-C or `ray job stop` (SIGTERM); the Redis data stays on disk (AOF) for the notebook.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from buffer.server import write_private
from actors.cluster.priority import SYSTEM_CONFIG
from launch.config import RunConfig
from launch.config.redact import redact


@dataclass
class RunResult:
    run_id: str
    run_path: Path
    redis_url: str
    metrics: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    startup: dict[str, float] = field(default_factory=dict)     # start-up phase -> seconds
    code_isolation: tuple[str, ...] | None = None               # the code sandbox's walls (None: no code problems)


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


def _resolve_layout(cfg: RunConfig) -> tuple[RunConfig, float]:
    """Refuse, before anything starts, a GPU layout the cluster cannot hold (naming the fix); write
    the weight transport (and collective backend) the placement calls for into the config and say
    which and why (launch.config.layout). Returns the config and the cluster's GPU count."""
    import ray

    from launch.config.layout import LayoutError, choose_transport, cluster_problems, resolved_actors

    gpus = float(ray.cluster_resources().get("GPU", 0))
    problems = cluster_problems(cfg, gpus)
    if problems:
        raise LayoutError("this GPU layout cannot run: " + "; ".join(problems))
    choice = choose_transport(cfg, gpus)
    print(choice.line(), flush=True)
    return cfg.model_copy(update={"actors": resolved_actors(cfg, choice)}), gpus


def _record_optimizer(cfg: RunConfig, learner, run_path: Path, buffer) -> RunConfig:
    """The optimizer the learner ranks resolved (learner.optimizer), into the console, config.json and
    the run's meta."""
    print(f"[driver] optimizer: {learner.ranks.optimizer_label} (learner.optimizer {cfg.learner.optimizer})",
          flush=True)
    cfg = cfg.model_copy(update={"learner": cfg.learner.model_copy(update={"optimizer": learner.ranks.optimizer})})
    write_private(run_path / "config.json", cfg.model_dump_json(indent=2))
    buffer.set_meta(config=redact(cfg))
    return cfg


def make_run_dir(path: Path) -> Path:
    """The run directory, owner-only (0700, also when it exists already): it holds the files with the
    Redis password (config.json, redis_url.txt, redis.json) and everything the run writes."""
    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def local_resources(cfg: RunConfig) -> dict[str, float]:
    """The custom resources the config asks for (actors.resources, learner.resources), given to the
    local single-node Ray so a config written for a cluster also runs on one machine."""
    need: dict[str, float] = {}
    for per, count in ((cfg.actors.resources, cfg.actors.num_actors), (cfg.learner.resources, cfg.learner.num_ranks)):
        for name, amount in per.items():
            need[name] = need.get(name, 0.0) + amount * count
    return {k: float(int(v + 0.999)) for k, v in need.items()}


class _Stop:
    """SIGTERM (ray job stop) and SIGINT end the run cleanly between learner steps."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.requested:               # second signal: stop waiting for a clean shutdown
            raise KeyboardInterrupt
        self.requested = True
        print(f"\n[driver] signal {signum}: stopping after the current step (now, if it is still waiting "
              f"for data; a second signal stops at once)", flush=True)


def run(cfg: RunConfig, on_step=None) -> RunResult:
    """The run ``cfg`` describes, to its end. ``on_step(learner, actors, metrics)``: called after each
    learner step, before the next one starts (tests check the engines against the learner there)."""
    import ray
    from transformers import AutoTokenizer

    from actors.cluster.model_source import share_model
    from actors.factory import actor_name, create_generation_actors, start_loops, wait_started
    from actors.transport import transport_for
    from buffer import RunBuffer, open_buffer_server
    from launch.config.layout import engines_start_early
    from launch.run.data import PromptRenderer
    from launch.run.evaluation import Evaluator
    from launch.run.feeder import PromptFeeder
    from launch.run.progress import Progress, StartupClock
    from launch.run.prompt_stats import PromptStats
    from launch.run.summary import build_summary, format_summary, read_evals, read_metrics, summary_scalars
    from launch.run.tracking import Trackers, check_available, open_trackers
    from learner.errors import StepInterrupted
    from learner.loop import Learner
    from rewards.code_isolation import describe as describe_isolation
    from rewards.problems import append_jsonl
    from rewards.workers import RewardPool

    started = time.monotonic()
    clock = StartupClock(started)
    run_path = make_run_dir(cfg.path)
    model_dir, train_path, eval_path, template = _resolve_data(cfg)
    check_available(cfg.tracking.backends)          # a missing tracker package fails before anything starts
    problems = _load(cfg, train_path)               # so does a bad dataset row
    eval_problems = _load(cfg, eval_path) if eval_path else None

    clock.mark("data")
    init_ray(cfg)
    clock.mark("ray")
    cfg, gpus = _resolve_layout(cfg)       # refusals that need the cluster; the weight transport 'auto' picks
    write_private(run_path / "config.json", cfg.model_dump_json(indent=2))   # may name a REDIS_URL with its password
    model = share_model(model_dir, cfg.data.model_source)      # the shared path, or pieces in the object store
    url, server = open_buffer_server(cfg.buffer, run_path)
    buffer = RunBuffer.from_url(url, cfg.run_id, cfg.buffer)
    # the meta hash is read by anyone with the URL (notebooks, other runs on a shared server): no secrets
    buffer.set_meta(config=redact(cfg), preset=cfg.preset, **model.describe(),
                    tokenizer_path=model_dir, run_path=str(run_path), started=time.time())
    write_private(run_path / "redis_url.txt", url + "\n")     # holds the password
    print(f"[driver] run {cfg.run_id} in {run_path}; redis {redact(url)}; "
          f"ray {ray.get_runtime_context().gcs_address}", flush=True)

    clock.mark("layout, model, redis")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = PromptRenderer(tokenizer, cfg.data.chat_template, template)
    result = RunResult(cfg.run_id, run_path, url)
    stop, stop_reason = _Stop(), "completed"
    pool = actors = loops = feeder = learner = None
    trackers = Trackers([])
    try:
        # a run with code problems checks the sandbox's walls on every worker first (rewards.code_isolation)
        pool = RewardPool(cfg=cfg.rewards, code=_has_code(cfg, problems, eval_problems))
        if pool.code_isolation is not None:
            print(describe_isolation(pool.code_isolation, cfg.rewards), flush=True)
            result.code_isolation = pool.code_isolation
        transport, actors = transport_for(cfg.actors, cfg.run_id, keep_versions=cfg.learner.versions_needed), []

        def start_engines(actor_transport) -> None:
            actors.extend(create_generation_actors(
                cfg.actors, cfg.run_id, url, model, group_size=cfg.group_size, seed=cfg.seed, reward_scorer=pool,
                buffer_cfg=cfg.buffer, log_dir=str(run_path / "logs"), transport=actor_transport))

        # Where they may (launch.config.layout.engines_start_early: the object store, no shared GPU), the actors
        # build their engines while the ranks load DeepSpeed and the model: start-up is the longer of
        # the two, not their sum. Otherwise (a collective transport's members join rank 0's group as
        # they start) they are created once the learner is up.
        early = engines_start_early(cfg, gpus, transport_has_membership=transport.upkeep_s is not None)
        learner = Learner.from_url(cfg.learner, buffer_url=url, run_id=cfg.run_id, buffer_cfg=cfg.buffer,
                                   model_dir=model, run_dir=run_path, transport=transport,
                                   temperature=cfg.temperature, group_size=cfg.group_size, seed=cfg.seed,
                                   on_transport=start_engines if early else None)
        clock.mark("learner (engines alongside)" if early else "learner")
        cfg = _record_optimizer(cfg, learner, run_path, buffer)
        if learner.resumed_from:
            r = learner.resumed_from
            print(f"[driver] resumed from {r['path']} at step {r['step']}, version {r['version']} "
                  f"(buffer at {r['published']})", flush=True)
            if r.get("republished"):
                print(f"[driver] fixed lag {cfg.learner.fixed_lag}: versions {r['republished']} republished "
                      "from the checkpoint for the prompts pinned to them", flush=True)
        # the run id names the tracker run; a resumed run continues it from the step it retrains
        trackers = open_trackers(cfg.tracking, name=cfg.run_id, log_dir=run_path, store_root=run_path.parent,
                                 hparams=cfg.model_dump(mode="json"), start_step=learner.steps_done)
        clock.mark("trackers")
        if not actors:
            start_engines(learner.actor_transport)
        loops = start_loops(actors)
        _record_placement(run_path, buffer, wait_started(actors, cfg.actors, cfg.run_id), learner, model)
        clock.mark("engines ready")
        # a collective transport forms its group with every actor here (the object store returns at once)
        learner.sync_actors([actor_name(cfg.run_id, i) for i in range(cfg.actors.num_actors)],
                            timeout_s=cfg.actors.collective.start_timeout_s)
        clock.mark("first weights")
        feeder = PromptFeeder(buffer, problems, renderer, rollout_batch=cfg.learner.batch.rollout_batch,
                              group_size=cfg.group_size, temperature=cfg.temperature,
                              max_model_len=cfg.actors.max_model_len, stage_at=cfg.data.stage_at,
                              seed=cfg.seed, over_issue_waste=cfg.data.over_issue_waste)
        stats = PromptStats(buffer)
        evaluator = None
        if eval_problems:
            evaluator = Evaluator(url, cfg.run_id, eval_problems, renderer, n=cfg.data.eval_n,
                                  temperature=cfg.temperature, max_problems=cfg.data.eval_max_problems)

        def evaluate() -> None:
            if _servable(learner, buffer):
                budget = cfg.data.eval_max_tokens(learner.steps_done)
                result.evals.append(_evaluate(evaluator, buffer, learner, budget))
                append_jsonl(result.evals[-1], run_path / "evals.jsonl")   # the whole run's, across resumes
                trackers.log_eval(result.evals[-1])

        if evaluator:
            evaluate()
            clock.mark("first evaluation")
        print(clock.line(), flush=True)
        result.startup = clock.phases
        feeder.start()
        deadline = started + cfg.max_wall_s if cfg.max_wall_s else None
        progress = Progress(cfg.steps, start_step=learner.steps_done, deadline=deadline)
        stage = cfg.data.stage_at(learner.steps_done)[0]
        while learner.steps_done < cfg.steps and not stop.requested:
            if deadline is not None and time.monotonic() > deadline:
                stop_reason = f"max_wall_s={cfg.max_wall_s} reached"
                print(f"[driver] {stop_reason}", flush=True)
                break
            new_stage, tokens = cfg.data.stage_at(learner.steps_done)
            if new_stage != stage:
                stage = new_stage
                solved = stats.update().solved() if cfg.data.online_filter else set()
                feeder.mark_solved(solved)
                print(f"[driver] stage {stage}: response budget {tokens} tokens; filtered {len(solved)} "
                      f"solved prompts", flush=True)
            try:
                metrics = learner.step(should_stop=lambda: stop.requested)
            except StepInterrupted as exc:        # nothing trained; its groups stay pending for a resume
                print(f"[driver] {exc}", flush=True)
                break
            stats.update()
            result.metrics.append(metrics)
            append_jsonl(metrics, run_path / "metrics.jsonl")
            trackers.log_metrics(metrics)
            print(progress.line(metrics, actors_tokens_per_s(buffer)), flush=True)
            if on_step is not None:
                on_step(learner, actors, metrics)
            if "guard/event" in metrics:
                print(metrics["guard/event"]["message"], flush=True)
            if evaluator and cfg.data.eval_every and learner.steps_done % cfg.data.eval_every == 0:
                evaluate()
        if stop.requested:
            stop_reason = "stopped by signal"
        if evaluator and (not result.evals or result.evals[-1]["step"] != learner.steps_done):
            evaluate()
    except BaseException:
        trackers.close(failed=True)
        raise
    finally:
        _shutdown(feeder, actors, loops, learner, pool)
        if server is not None:
            server.stop()
    result.seconds = time.monotonic() - started
    summary = build_summary(run_id=cfg.run_id, preset=cfg.preset, run_path=run_path, steps_total=cfg.steps,
                            seconds=result.seconds, rows=read_metrics(run_path / "metrics.jsonl"),
                            evals=read_evals(run_path / "evals.jsonl"), stop_reason=stop_reason,
                            startup=result.startup, code_isolation=result.code_isolation)
    (run_path / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    trackers.log_summary(summary_scalars(summary))
    trackers.close()
    print(format_summary(summary), flush=True)
    return result


def actors_tokens_per_s(buffer) -> float:
    from buffer.monitor import Monitor
    return sum(float(a.get("tokens_per_s", 0.0)) for a in Monitor(buffer.client, buffer.run_id).actors().values())


def _servable(learner, buffer) -> bool:
    """False while a resumed learner retrains steps its killed incarnation had already published:
    those weights died with that job and the buffer's version never goes backwards, so actors
    cannot serve this version and an evaluation of it would wait forever (it is skipped)."""
    published = buffer.get_version()[0]
    if learner.version < published:
        print(f"[driver] evaluation at version {learner.version} skipped: replaying up to the published "
              f"version {published} after a resume", flush=True)
    return learner.version >= published


def _evaluate(evaluator, buffer, learner, max_tokens: int) -> dict:
    step = learner.steps_done
    row = {"step": step, "version": learner.version, **evaluator.evaluate(learner.version, step, max_tokens)}
    buffer.write_metrics(row)
    print(f"[eval] step {step} version {learner.version}: avg@{row['eval/n']} {row['eval/avg@n']:.3f} "
          f"over {row['eval/problems']} problems ({row['eval/seconds']:.1f}s)", flush=True)
    return row


def _has_code(cfg: RunConfig, *problem_sets) -> bool:
    """Whether any problem goes to the code sandbox (rewards.scoring's routing)."""
    from rewards.scoring import resolve_kind

    return any(resolve_kind(p.answer, p.data_source, cfg=cfg.rewards) == "code"
               for problems in problem_sets if problems for p in problems)


def _load(cfg: RunConfig, path: str):
    from rewards.problems import load_problems
    from rewards.spec_limits import SpecLimits

    # code test specs checked here, where a bad one is a row number: they travel in every buffer message
    limits = SpecLimits.of(cfg.rewards, cfg.buffer.max_message_bytes)
    return load_problems(path, cfg.data.prompt_key, cfg.data.answer_key, format=cfg.data.format,
                         bad_rows=cfg.data.bad_rows, code_sources=cfg.rewards.code_data_sources, limits=limits)


def _resolve_data(cfg: RunConfig) -> tuple[str, str, str | None, str]:
    """(model dir, train path, eval path, prompt template when the tokenizer has no chat template)."""
    if cfg.world is not None:
        from launch.worlds import world_data
        return world_data(cfg.world, cfg.data)
    if not cfg.data.model_dir or not cfg.data.train_path:
        raise ValueError("--data.model_dir (a Hugging Face model directory) and --data.train_path (a JSONL/"
                         "parquet of math problems) are required unless a world is chosen (--world, --tiny, ...)")
    return cfg.data.model_dir, cfg.data.train_path, cfg.data.eval_path, "{problem}\n"


def _shutdown(feeder, actors, loops, learner, pool) -> None:
    """Stop in dependency order; each step is best-effort so one failure cannot leak the rest."""
    import ray

    steps = [
        ("feeder", lambda: feeder and feeder.stop()),
        ("actors", lambda: actors and _stop_actors(actors, loops or [])),
        ("learner", lambda: learner and learner.close()),
        ("reward pool", lambda: pool and pool.shutdown()),
        ("actor kill", lambda: actors and [ray.kill(a) for a in actors]),
        ("staged weights", _sweep_staged),     # this node's copies that killed actors left in memory
    ]
    for name, fn in steps:
        try:
            fn()
        except Exception as exc:
            print(f"[driver] shutdown of {name} failed: {type(exc).__name__}: {exc}", flush=True)


def _sweep_staged() -> None:
    from actors.transport.staging import sweep

    removed = sweep()
    if removed:
        print(f"[driver] removed {len(removed)} staged weight file(s) of dead actors: {removed}", flush=True)


def _stop_actors(actors, loops) -> None:
    """Ask every actor to stop, then wait for the loops of those that answered. An actor that does not
    answer within 20 s (its node died and Ray cannot place it again) is left to the final kill."""
    import ray

    stops = [a.stop.remote() for a in actors]
    answered, _ = ray.wait(stops, num_returns=len(stops), timeout=20)
    draining = [loop for stop, loop in zip(stops, loops) if stop in answered]
    if draining:
        ray.wait(draining, num_returns=len(draining), timeout=120)
    if len(answered) < len(stops):
        print(f"[driver] {len(stops) - len(answered)} actor(s) did not answer stop (node gone?)", flush=True)


def _record_placement(run_path: Path, buffer, actors: dict[str, dict], learner, model) -> None:
    """Where the driver, every actor and every learner rank run (and which model directory each
    opened): ``placement.json`` in the run directory, the run's meta, one console line when they
    span several nodes."""
    from actors.cluster.placement import driver_location, placement_line

    placement = {"driver": driver_location(), "actors": actors, "learner": learner.ranks.nodes,
                 "model": model.describe()}
    (run_path / "placement.json").write_text(json.dumps(placement, indent=1))
    buffer.set_meta(placement=placement)
    nodes = {placement["driver"]["node_id"], *(a["node_id"] for a in actors.values()),
             *(r["node_id"] for r in learner.ranks.nodes)}
    if len(nodes) > 1:          # on one machine the line says nothing (placement.json still records it)
        print(placement_line(placement), flush=True)
