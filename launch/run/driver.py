"""The run driver: wires Ray, Redis, reward workers, generation actors, the learner and the feeder.

    python launch/onpolicy.py --tiny                         # local Ray + private redis-server
    RAY_ADDRESS=... REDIS_URL=... python launch/onpolicy.py --data.model_dir ... --data.train_path ...

Under `ray job submit` RAY_ADDRESS is set and the driver joins that cluster; run plainly it starts a
local Ray (no dashboard, token auth on: Ray 2.60 still registers the node IP and listens beyond
loopback, see README "Network exposure"). With no REDIS_URL it starts (or, after a crash, re-attaches to) a
private redis-server in the run directory. Everything it started is stopped on completion,
Ctrl-C or `ray job stop` (SIGTERM); the Redis data stays on disk (AOF) for the notebook.

:func:`run` reads as the run's phases, one method of :class:`_Run` each: the data and the config, the
services (Ray, Redis, the buffer), the workers (reward pool, learner, engines), the first weights and
evaluation, the step loop, the shutdown and the summary. The steps of each phase live beside it
(``launch.run.startup``, ``launch.run.stopping``, ``launch.run.evaluation``).
"""

from __future__ import annotations

import importlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from actors.cluster.model_source import share_model
from actors.factory import actor_name, create_generation_actors, start_loops, wait_started
from actors.transport import transport_for
from buffer import RunBuffer, open_buffer_server
from buffer.server import write_private
from launch.config import RunConfig
from launch.config.layout import engines_start_early
from launch.config.redact import redact
from launch.run.data import PromptRenderer
from launch.run.evaluation import Evaluator, evaluation_row, servable
from launch.run.feeder import PromptFeeder
from launch.run.progress import Progress, StartupClock, actors_tokens_per_s
from launch.run.prompt_stats import PromptStats
from launch.run.shared_eval import SHARED_EVAL_ENV, evaluation_key
from launch.run.startup import (  # noqa: F401  (init_ray, local_resources, make_run_dir: the driver's API too)
    has_code,
    init_ray,
    load_problem_set,
    local_resources,
    make_run_dir,
    record_optimizer,
    record_placement,
    record_resume,
    resolve_data,
    resolve_layout,
)
from launch.run.stopping import StopSignal, shut_down
from launch.run.summary import build_summary, format_summary, read_evals, read_metrics, summary_scalars
from launch.run.tracking import Trackers, check_available, open_trackers
from learner.errors import StepInterrupted
from learner.loop import Learner
from rewards.code_isolation import describe as describe_isolation
from rewards.problems import append_jsonl
from rewards.workers import RewardPool


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


# what the phases import, imported before the start-up clock starts (its figures count the run, not Python)
_PARTS = ("ray", "transformers.models.auto.tokenization_auto", "actors.cluster.model_source", "actors.factory",
          "actors.transport", "buffer", "launch.config.layout", "launch.run.data", "launch.run.evaluation",
          "launch.run.feeder", "launch.run.progress", "launch.run.prompt_stats", "launch.run.summary",
          "launch.run.tracking", "learner.errors", "learner.loop", "rewards.code_isolation", "rewards.problems",
          "rewards.workers")


def run(cfg: RunConfig, on_step=None) -> RunResult:
    """The run ``cfg`` describes, to its end. ``on_step(learner, actors, metrics)``: called after each
    learner step, before the next one starts (tests check the engines against the learner there)."""
    for name in _PARTS:
        importlib.import_module(name)
    r = _Run(cfg)
    r.prepare_data()             # run dir, datasets, tracker packages: what can be refused before anything starts
    r.start_services()           # Ray, the GPU layout, the shared model, Redis and the run's buffer
    try:
        r.start_workers()        # reward pool, learner (engines alongside where they may), trackers, engines
        r.send_first_weights()   # a collective transport forms its group with every actor here
        r.first_evaluation()     # the feeder and the evaluator; the step-0 evaluation; the start-up line
        r.step_loop(on_step)     # learner steps until cfg.steps, max_wall_s or a signal
        r.last_evaluation()
    except BaseException:
        r.trackers.close(failed=True)
        raise
    finally:
        r.shut_down()
    return r.summarize()


class _Run:
    """One run's state, built up phase by phase (:func:`run` calls them in order)."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.started = time.monotonic()
        self.clock = StartupClock(self.started)
        self.stop_reason = "completed"
        self.server = self.pool = self.learner = self.feeder = self.evaluator = None
        self.actors, self.loops = [], None
        self.trackers = Trackers([])

    # -- the data and the config ---------------------------------------------------------------------
    def prepare_data(self) -> None:
        cfg = self.cfg
        self.run_path = make_run_dir(cfg.path)
        self.model_dir, train_path, eval_path, self.template = resolve_data(cfg)
        check_available(cfg.tracking.backends)          # a missing tracker package fails before anything starts
        self.problems = load_problem_set(cfg, train_path)               # so does a bad dataset row
        self.eval_problems = load_problem_set(cfg, eval_path) if eval_path else None
        self.clock.mark("data")

    # -- Ray, Redis, the buffer ----------------------------------------------------------------------
    def start_services(self) -> None:
        import ray
        from transformers import AutoTokenizer


        init_ray(self.cfg)
        self.clock.mark("ray")
        # refusals that need the cluster; the weight transport 'auto' picks
        self.cfg, self.gpus = resolve_layout(self.cfg)
        cfg, run_path = self.cfg, self.run_path
        write_private(run_path / "config.json", cfg.model_dump_json(indent=2))   # may name a REDIS_URL with its password
        # the shared path, or pieces in the object store
        self.model = share_model(self.model_dir, cfg.data.model_source)
        self.url, self.server = open_buffer_server(cfg.buffer, run_path)
        self.buffer = RunBuffer.from_url(self.url, cfg.run_id, cfg.buffer)
        # the meta hash is read by anyone with the URL (notebooks, other runs on a shared server): no secrets
        self.buffer.set_meta(config=redact(cfg), preset=cfg.preset, **self.model.describe(),
                             tokenizer_path=self.model_dir, run_path=str(run_path), started=time.time())
        write_private(run_path / "redis_url.txt", self.url + "\n")     # holds the password
        print(f"[driver] run {cfg.run_id} in {run_path}; redis {redact(self.url)}; "
              f"ray {ray.get_runtime_context().gcs_address}", flush=True)
        self.clock.mark("layout, model, redis")
        tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.renderer = PromptRenderer(tokenizer, cfg.data.chat_template, self.template)
        self.result = RunResult(cfg.run_id, run_path, self.url)
        self.stop = StopSignal()

    # -- reward pool, learner, trackers, engines -----------------------------------------------------
    def start_workers(self) -> None:
        cfg = self.cfg
        # a run with code problems checks the sandbox's walls on every worker first (rewards.code_isolation)
        self.pool = RewardPool(cfg=cfg.rewards, code=has_code(cfg, self.problems, self.eval_problems))
        if self.pool.code_isolation is not None:
            print(describe_isolation(self.pool.code_isolation, cfg.rewards), flush=True)
            self.result.code_isolation = self.pool.code_isolation
        transport = transport_for(cfg.actors, cfg.run_id, keep_versions=cfg.learner.versions_needed)
        # Where they may (launch.config.layout.engines_start_early: the object store, no shared GPU), the actors
        # build their engines while the ranks load DeepSpeed and the model: start-up is the longer of
        # the two, not their sum. Otherwise (a collective transport's members join rank 0's group as
        # they start) they are created once the learner is up.
        early = engines_start_early(cfg, self.gpus, transport_has_membership=transport.upkeep_s is not None)
        self.learner = Learner.from_url(cfg.learner, buffer_url=self.url, run_id=cfg.run_id, buffer_cfg=cfg.buffer,
                                        model_dir=self.model, run_dir=self.run_path, transport=transport,
                                        temperature=cfg.temperature, group_size=cfg.group_size, seed=cfg.seed,
                                        on_transport=self._start_engines if early else None)
        self.clock.mark("learner (engines alongside)" if early else "learner")
        self.cfg = cfg = record_optimizer(cfg, self.learner, self.run_path, self.buffer)
        record_resume(cfg, self.learner)
        # the run id names the tracker run; a resumed run continues it from the step it retrains
        self.trackers = open_trackers(cfg.tracking, name=cfg.run_id, log_dir=self.run_path,
                                      store_root=self.run_path.parent, hparams=cfg.model_dump(mode="json"),
                                      start_step=self.learner.steps_done)
        self.clock.mark("trackers")
        if not self.actors:
            self._start_engines(self.learner.actor_transport)
        self.loops = start_loops(self.actors)
        record_placement(self.run_path, self.buffer, wait_started(self.actors, cfg.actors, cfg.run_id),
                         self.learner, self.model)
        self.clock.mark("engines ready")

    def _start_engines(self, actor_transport) -> None:
        cfg = self.cfg
        self.actors.extend(create_generation_actors(
            cfg.actors, cfg.run_id, self.url, self.model, group_size=cfg.group_size, seed=cfg.seed,
            reward_scorer=self.pool, buffer_cfg=cfg.buffer, log_dir=str(self.run_path / "logs"),
            transport=actor_transport))

    # -- the first weights and the first evaluation --------------------------------------------------
    def send_first_weights(self) -> None:
        cfg = self.cfg
        # a collective transport forms its group with every actor here (the object store returns at once)
        self.learner.sync_actors([actor_name(cfg.run_id, i) for i in range(cfg.actors.num_actors)],
                                 timeout_s=cfg.actors.collective.start_timeout_s)
        self.clock.mark("first weights")

    def first_evaluation(self) -> None:
        cfg = self.cfg
        self.feeder = PromptFeeder(self.buffer, self.problems, self.renderer,
                                   rollout_batch=cfg.learner.batch.rollout_batch, group_size=cfg.group_size,
                                   temperature=cfg.temperature, max_model_len=cfg.actors.max_model_len,
                                   stage_at=cfg.data.stage_at, seed=cfg.seed,
                                   over_issue_waste=cfg.data.over_issue_waste)
        self.stats = PromptStats(self.buffer)
        if self.eval_problems:
            self.evaluator = Evaluator(self.url, cfg.run_id, self.eval_problems, self.renderer, n=cfg.data.eval_n,
                                       temperature=cfg.temperature, max_problems=cfg.data.eval_max_problems,
                                       probe_problems=cfg.data.probe_problems, probe_n=cfg.data.probe_n,
                                       eval_temperature=cfg.data.eval_temperature)
            self._evaluate()
            self.clock.mark("first evaluation")
        print(self.clock.line(), flush=True)
        self.result.startup = self.clock.phases

    def _evaluate(self, n: int | None = None) -> None:
        """The current version evaluated with ``n`` samples per problem (None: ``data.eval_n``); only an
        evaluation at eval_n may share the report's step-0 row (its key pins eval_n)."""
        if servable(self.learner, self.buffer):
            n = n or self.cfg.data.eval_n
            budget = self.cfg.data.eval_max_tokens(self.learner.steps_done)
            key = self._shared_key(budget) if self.learner.version == 0 and n == self.cfg.data.eval_n else None
            self.result.evals.append(evaluation_row(self.evaluator, self.buffer, self.learner, budget, key, n))
            append_jsonl(self.result.evals[-1], self.run_path / "evals.jsonl")   # the whole run's, across resumes
            self.trackers.log_eval(self.result.evals[-1])

    def _shared_key(self, budget: int) -> str | None:
        """The step-0 evaluation's key, when the run is part of a report that shares it (launch.run.shared_eval)."""
        if not os.environ.get(SHARED_EVAL_ENV):
            return None
        prompts = [self.renderer.ids(p) for p in self.evaluator.problems]
        return evaluation_key(self.model_dir, prompts, self.cfg, budget)

    # -- the step loop -------------------------------------------------------------------------------
    def step_loop(self, on_step) -> None:
        cfg, learner = self.cfg, self.learner
        self.feeder.start()
        deadline = self.started + cfg.max_wall_s if cfg.max_wall_s else None
        progress = Progress(cfg.steps, start_step=learner.steps_done, deadline=deadline)
        self.stage = cfg.data.stage_at(learner.steps_done)[0]
        while learner.steps_done < cfg.steps and not self.stop.requested:
            if deadline is not None and time.monotonic() > deadline:
                self.stop_reason = f"max_wall_s={cfg.max_wall_s} reached"
                print(f"[driver] {self.stop_reason}", flush=True)
                break
            self._enter_stage()
            try:
                metrics = learner.step(should_stop=lambda: self.stop.requested)
            except StepInterrupted as exc:        # nothing trained; its groups stay pending for a resume
                print(f"[driver] {exc}", flush=True)
                break
            self._record_step(metrics, progress, on_step)
        if self.stop.requested:
            self.stop_reason = "stopped by signal"

    def _enter_stage(self) -> None:
        """At a stage boundary: the new response budget, and (online filter) the solved prompts dropped."""
        cfg = self.cfg
        new_stage, tokens = cfg.data.stage_at(self.learner.steps_done)
        if new_stage != self.stage:
            self.stage = new_stage
            solved = self.stats.update().solved() if cfg.data.online_filter else set()
            self.feeder.mark_solved(solved)
            print(f"[driver] stage {self.stage}: response budget {tokens} tokens; filtered {len(solved)} "
                  f"solved prompts", flush=True)

    def _record_step(self, metrics: dict, progress, on_step) -> None:
        """A step's row into metrics.jsonl, the trackers and the console; the hook; a due evaluation."""
        cfg, learner = self.cfg, self.learner
        self.stats.update()
        self.result.metrics.append(metrics)
        append_jsonl(metrics, self.run_path / "metrics.jsonl")
        self.trackers.log_metrics(metrics)
        print(progress.line(metrics, actors_tokens_per_s(self.buffer)), flush=True)
        if on_step is not None:
            on_step(learner, self.actors, metrics)
        if "guard/event" in metrics:
            print(metrics["guard/event"]["message"], flush=True)
        # the last step's evaluation is the run's final one (last_evaluation), at data.final_eval_n
        if (self.evaluator and cfg.data.eval_every and learner.steps_done % cfg.data.eval_every == 0
                and learner.steps_done < cfg.steps):
            self._evaluate()

    def last_evaluation(self) -> None:
        """The final weights evaluated with ``data.final_eval_samples`` per problem, unless they already were
        (a run stopped early can end just after an evaluation at eval_n: it is evaluated again, and that
        step's last row is the one read back, ``launch.run.summary.read_evals``)."""
        evals, n = self.result.evals, self.cfg.data.final_eval_samples
        if self.evaluator and not (evals and evals[-1]["step"] == self.learner.steps_done and evals[-1]["eval/n"] == n):
            self._evaluate(n)

    # -- shutdown and summary ------------------------------------------------------------------------
    def shut_down(self) -> None:
        shut_down(self.feeder, self.actors, self.loops, self.learner, self.pool)
        if self.server is not None:
            self.server.stop()

    def summarize(self) -> RunResult:
        """summary.json, the trackers' summary (then closed), the console's summary."""
        cfg, result, run_path = self.cfg, self.result, self.run_path
        result.seconds = time.monotonic() - self.started
        summary = build_summary(run_id=cfg.run_id, preset=cfg.preset, run_path=run_path, steps_total=cfg.steps,
                                seconds=result.seconds, rows=read_metrics(run_path / "metrics.jsonl"),
                                evals=read_evals(run_path / "evals.jsonl"), stop_reason=self.stop_reason,
                                startup=result.startup, code_isolation=result.code_isolation)
        (run_path / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
        self.trackers.log_summary(summary_scalars(summary))
        self.trackers.close()
        print(format_summary(summary), flush=True)
        return result
