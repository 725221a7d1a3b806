"""GenerationActor: a long-running Ray actor that owns one vLLM engine and feeds the buffer.

Loop (one iteration per engine step):
  1. weights: if the buffer's version is newer than the engine's, fetch and load it in place
     (between engine steps, so requests in flight continue on the new weights and record
     `version_end > version_start` instead of hiding the swap; ``actors.engine_weights``);
  2. admission: take prompts from the `prompts` consumer group while fewer than
     `max_prompts_in_flight` are in the engine (or held, below; ``actors.intake``); a prompt starts
     only once the engine runs weights of at least its `min_version` (strict on-policy: exactly its
     step's version). A pinned prompt (fixed-lag mode, `PromptMsg.pin_version`) starts only on exactly
     that version, which may be older than the newest: the actor then loads it by version from the
     transport (`location_for`). While a pinned request runs, the weights never change (step 1 waits),
     so its responses come from one version; prompts that need other weights are held until then
     (``actors.requests``);
  3. one `LLMEngine.step()` (continuous batching over every request in flight);
  4. finished groups go to the reward pool (in a thread, so scoring overlaps generation; those one
     engine step finished share a call per reward worker; ``actors.reward_calls``), and scored groups
     are written to `groups` together with the ACK of their prompt (one Redis transaction: a prompt is
     acknowledged iff its group is stored; ``actors.scoring_book``).
A prompt taken but not finished when the actor dies stays pending in Redis and is reclaimed by
another actor after `reclaim_idle_ms`; Ray restarts the actor and re-runs `run()`. The heartbeat and
status row: ``actors.bookkeeping``.
"""

from __future__ import annotations

import os
import threading
import time
import traceback

import ray

from actors.bookkeeping import ActorStats, Heartbeat, status_row
from actors.config import ActorConfig
from actors.engine_weights import EngineWeights
from actors.intake import Intake
from actors.requests import EngineStepFailed, Requests
from actors.reward_calls import RewardCalls


def eval_run_id(run_id: str) -> str:
    """Held-out evaluation prompts live in their own namespace, so their groups never reach the learner."""
    return f"{run_id}.eval"


class GenerationActorImpl:
    """The actor's body; wrapped with @ray.remote by `actors.factory`."""

    def __init__(self, actor_id: str, run_id: str, redis_url: str, model_dir, cfg: ActorConfig, *,
                 group_size: int, seed: int = 0, reward_scorer=None, transport=None, buffer_cfg=None,
                 log_dir: str | None = None):
        """``model_dir``: a path or a ``actors.cluster.model_source.ModelSource`` (resolved on this node);
        ``log_dir``: where the engine logs (``<run>/logs``; None: this process's stdout)."""
        from actors.cluster.heap import freeze_startup_heap
        from actors.cluster.model_source import resolve_model_dir
        from actors.cluster.priority import warn_if_niced
        from actors.engine import build_llm
        from actors.transport import transport_for
        from buffer import RunBuffer

        self.actor_id, self.cfg = actor_id, cfg
        warn_if_niced(f"generation actor {actor_id}")
        self.model_dir = model_dir = resolve_model_dir(model_dir)   # ModelUnavailable names path and node
        if log_dir is not None:
            from actors.engine_logs import route_engine_logs
            route_engine_logs(log_dir, actor_id, model_dir)      # before vLLM is imported here
        # buffer_cfg: the run's BufferConfig (None = defaults), e.g. its reclaim_idle_ms / backpressure
        self.buffer = RunBuffer.from_url(redis_url, run_id, buffer_cfg)
        self.eval_buffer = RunBuffer.from_url(redis_url, eval_run_id(run_id), buffer_cfg)
        self.transport = transport or transport_for(cfg.transport_or_default(), run_id)
        index = int(actor_id.rsplit("-", 1)[-1]) if actor_id[-1].isdigit() else 0
        # every prompt in flight runs its whole group at once (the run's group size)
        self.llm = build_llm(cfg, model_dir, seed=seed + index,
                             max_num_seqs=max(cfg.max_prompts_in_flight * group_size, 16),
                             **self.transport.llm_kwargs())
        self.engine = self.llm.llm_engine
        # vLLM's engine client is not thread-safe (with the engine core out of process it is a ZMQ
        # socket): the loop thread and control calls (weights_checksum) take turns
        self._engine_lock = threading.RLock()
        self._stop = threading.Event()
        # set by the watches once they have marked a grown prompt stream or read a new version: an idle
        # actor waits on it (cleared at each iteration's start, so nothing after that is missed)
        self._wake = threading.Event()
        self.stats = ActorStats()
        self.rewards = RewardCalls(actor_id, reward_scorer, self.llm.get_tokenizer(), self.stats.note)
        self.weights = EngineWeights(self.llm, self.transport, self.buffer.watch_version(on_change=self._wake.set),
                                     self._engine_lock, self.stats)
        self.intake = Intake(actor_id, cfg.max_model_len, self.buffer, self.eval_buffer, self._wake.set,
                             serves_pins=self.weights.serves_pins, transport_name=type(self.transport).__name__)
        self.requests = Requests(actor_id, cfg.top_p, self.engine, self._engine_lock, self.weights, self.stats,
                                 self._stop)
        self.heartbeat = Heartbeat(actor_id, cfg.heartbeat_s, (self.buffer, self.eval_buffer), self.status,
                                   lambda: [*self.requests.in_flight.values(), *self.rewards, *self.requests.held])
        self._last_version_check = 0.0
        self.transport.attach(actor_id, self.llm, keepalive=self.heartbeat.beat)
        self.sync_weights(force=True)  # a restarted actor rejoins at the current version
        freeze_startup_heap()          # no full collection walks the engine and libraries mid-step

    @property
    def version(self) -> int:
        """The version of the weights the engine holds."""
        return self.weights.version

    # ---- control (called from other threads: the Ray actor runs with max_concurrency > 1)
    def stop(self) -> None:
        self._stop.set()
        self._wake.set()                        # an idle actor's wait ends now

    def status(self) -> dict:
        return status_row(self.actor_id, self.stats, self.version, in_flight=len(self.requests.in_flight),
                          held=len(self.requests.held), scoring=len(self.rewards))

    def weights_checksum(self) -> float:
        return self.weights.checksum()

    def param_checksums(self) -> dict[str, float]:
        """Engine rank 0's float64 sum of each materialised parameter, by vLLM name."""
        return self.weights.param_checksums()

    def engine_pids(self) -> list[int]:
        """The engine's own processes (empty when its core runs in this one)."""
        from actors.engine import engine_pids

        return engine_pids()

    def sync_weights(self, force: bool = False) -> int:
        """Load what the transport has due; returns the version the engine holds (``EngineWeights.sync``)."""
        return self.weights.sync(force)

    def load_version(self, version: int) -> bool:
        """Load exactly ``version`` (a pinned prompt's); False when the transport does not have it (yet)."""
        return self.weights.load(version)

    # ---- main loop
    def run(self) -> dict:
        from vllm import SamplingParams  # noqa: F401  (engine env is set up by now)

        from actors.engine import shutdown_engine

        while not self._stop.is_set():
            try:
                self._iteration()
            except Exception as exc:  # keep the actor alive; the error is visible in the heartbeat
                self.stats.note(f"{type(exc).__name__}: {exc}")
                traceback.print_exc()
                if isinstance(exc, EngineStepFailed) or type(exc).__name__ == "EngineDeadError":
                    # the engine is gone or stuck mid-step: exit, so Ray restarts the actor with a new engine
                    self.heartbeat.beat(force=True)
                    os._exit(1)
                time.sleep(1.0)
        self.requests.abort_all()        # their prompts stay pending for reclaim, as do held ones
        self.stats.prompts_done += self.rewards.flush(block=True)
        self.weights.versions.stop()
        self.intake.stop()
        self.heartbeat.beat(force=True)
        shutdown_engine(self.engine, self._engine_lock, self.actor_id)
        self._sweep_staged()
        return self.status()

    def _iteration(self) -> None:
        self._wake.clear()
        now = time.monotonic()
        # a newer version (the watch saw it: no round trip), the transport's own cadence (a collective
        # send names this actor), or nothing running: look now
        due = (self.weights.published()[0] > self.version or now - self._last_version_check > 0.05
               or not self.requests.in_flight or not self.transport.consistent)
        if due and not self.requests.pinned_busy():      # pinned prompts choose the weights (module docstring)
            self._last_version_check = now
            self.sync_weights()
        if not self.transport.consistent:   # a receive failed mid-way: no token from mixed weights
            self.heartbeat.beat()
            time.sleep(0.05)
            return
        idle = not self.requests.in_flight and not self.rewards
        self._admit()
        self.rewards.submit(self.requests.step())
        self.stats.prompts_done += self.rewards.flush(block=False)
        self.heartbeat.beat()
        if not self.requests.in_flight:
            self._wait_for_work(idle)

    def _admit(self) -> None:
        """Take prompts while there is room (``actors.intake``) and start what the weights serve."""
        self.requests.start_held()
        busy = len(self.requests.in_flight) + len(self.rewards)
        room = self.cfg.max_prompts_in_flight - busy - len(self.requests.held)
        if room <= 0 and not busy:
            # only prompts held for a version not yet published: keep reading, a prompt servable now (a
            # replacement for the current step) may be queued behind them; else the step never completes
            room = self.cfg.max_prompts_in_flight
        self.intake.took_all = False
        if room <= 0:
            return
        self.requests.held += self.intake.take(room)
        self.requests.start_held()

    def _wait_for_work(self, idle: bool) -> None:
        """Nothing in the engine: block until there may be something to do, instead of spinning.

        Groups being scored: until one is scored (or a short while: a prompt may arrive meanwhile).
        Idle since the iteration began: until a watch has seen a prompt stream grow or read a new
        version (``_wake``), at most ``idle_poll_ms`` (a dead actor's prompts become reclaimable without
        an append: the timed read in ``_admit``). A version published but not loaded yet is retried
        within 20 ms; a pushing transport's send (the collective) is joined the moment the learner
        announces it, which waits for this actor."""
        if self._stop.is_set():
            return
        if self.rewards:
            self.rewards.wait(0.01)
            return
        if not idle:
            return
        due = self.weights.published()[0] > self.version and not self.requests.pinned_busy()
        if self.intake.took_all or any(self.requests.servable(h.prompt) for h in self.requests.held):
            return
        if due and self.transport.pushes:
            self.transport.wait_for_send(0.02)
            return
        self._wake.wait(0.02 if due else self.cfg.idle_poll_ms / 1000)

    def _sweep_staged(self) -> None:
        """Remove the weight copies dead writers on this node left staged (an actor killed mid-load)."""
        from actors.transport.staging import sweep

        try:
            sweep()
        except Exception as exc:
            print(f"[lagrl] {self.actor_id}: sweeping staged weights failed: {type(exc).__name__}: {exc}", flush=True)


GenerationActor = ray.remote(GenerationActorImpl)
