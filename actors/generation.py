"""GenerationActor: a long-running Ray actor that owns one vLLM engine and feeds the buffer.

Loop (one iteration per engine step):
  1. weights: if the buffer's version is newer than the engine's, fetch and load it in place
     (between engine steps, so requests in flight continue on the new weights and record
     `version_end > version_start` instead of hiding the swap);
  2. admission: take prompts from the `prompts` consumer group while fewer than
     `max_prompts_in_flight` are in the engine (or held, below); a prompt starts only once the
     engine runs weights of at least its `min_version` (strict on-policy: exactly its step's version).
     A pinned prompt (fixed-lag mode, `PromptMsg.pin_version`) starts only on exactly that version,
     which may be older than the newest: the actor then loads it by version from the transport
     (`location_for`). While a pinned request runs, the weights never change (step 1 waits), so its
     responses come from one version; prompts that need other weights are held until then;
  3. one `LLMEngine.step()` (continuous batching over every request in flight);
  4. finished groups go to the reward pool (in a thread, so scoring overlaps generation; those one
     engine step finished share a call per reward worker), and scored groups are written to
     `groups` together with the ACK of their prompt (one Redis transaction: a prompt is
     acknowledged iff its group is stored).
A prompt taken but not finished when the actor dies stays pending in Redis and is reclaimed by
another actor after `reclaim_idle_ms`; Ray restarts the actor and re-runs `run()`.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import ray

from actors.config import ActorConfig
from actors.scoring_book import Scoring, ScoringBook
from buffer.keys import entry_time
from buffer.messages import Group, PromptMsg, Response
from buffer.wake import StreamWatch
from rewards.config import RewardConfig
from rewards.scoring import may_run_code


@dataclass
class _InFlight:
    buffer: object            # the RunBuffer the prompt came from (training or evaluation)
    entry_id: str
    prompt: PromptMsg
    version_start: int
    taken_at: float
    trace: dict[str, float] = field(default_factory=dict)   # Group.trace so far


@dataclass
class _Held:
    """A prompt taken from the stream, waiting for the weights it must start on."""

    buffer: object
    entry_id: str
    prompt: PromptMsg
    trace: dict[str, float] = field(default_factory=dict)   # issued, taken (Group.trace)


def eval_run_id(run_id: str) -> str:
    """Held-out evaluation prompts live in their own namespace, so their groups never reach the learner."""
    return f"{run_id}.eval"


@dataclass
class _Stats:
    prompts_done: int = 0
    tokens_generated: int = 0
    started: float = field(default_factory=time.monotonic)
    last_error: str = ""
    weight_loads: int = 0


class GenerationActorImpl:
    """The actor's body; wrapped with @ray.remote by `actors.factory`."""

    def __init__(self, actor_id: str, run_id: str, redis_url: str, model_dir, cfg: ActorConfig, *,
                 group_size: int, seed: int = 0, reward_scorer=None, transport=None, buffer_cfg=None,
                 log_dir: str | None = None):
        """``model_dir``: a path or a ``actors.cluster.model_source.ModelSource`` (resolved on this node);
        ``log_dir``: where the engine logs (``<run>/logs``; None: this process's stdout)."""
        from actors.engine import build_llm
        from actors.transport import transport_for
        from buffer import RunBuffer
        from actors.cluster.heap import freeze_startup_heap
        from actors.cluster.model_source import resolve_model_dir
        from actors.cluster.priority import warn_if_niced

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
        self.scorer = reward_scorer
        index = int(actor_id.rsplit("-", 1)[-1]) if actor_id[-1].isdigit() else 0
        # every prompt in flight runs its whole group at once (the run's group size)
        self.llm = build_llm(cfg, model_dir, seed=seed + index,
                             max_num_seqs=max(cfg.max_prompts_in_flight * group_size, 16),
                             **self.transport.llm_kwargs())
        self.engine = self.llm.llm_engine
        self._tokenizer = self.llm.get_tokenizer()    # scoring threads decode the responses (_score)
        # vLLM's engine client is not thread-safe (with the engine core out of process it is a ZMQ
        # socket): the loop thread and control calls (weights_checksum) take turns
        self._engine_lock = threading.RLock()
        self.version = 0
        self._loaded_at = time.time()           # when the engine got self.version (trace "loaded")
        self._stop = threading.Event()
        self._in_flight: dict[str, _InFlight] = {}
        self._held: list[_Held] = []           # taken, waiting for their version (oldest first)
        # finished groups being scored, or scored and not yet stored (actors.scoring_book)
        self._scoring = ScoringBook(lambda groups: self._pool.submit(self._score, groups), self._note)
        # the groups an engine step finishes go out in one scoring call per reward worker at most
        # (_submit_scoring): a burst is scored at the pool's width (16 workers on a 16-core GPU host)
        self._scoring_width = max(1, getattr(reward_scorer, "parallelism", 1))
        self._reward_cfg = getattr(reward_scorer, "cfg", None) or RewardConfig()   # which groups may run code
        threads = max(4, self._scoring_width)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"{actor_id}-reward")
        self.stats = _Stats()
        self._last_beat = 0.0
        self._last_version_check = 0.0
        self._last_version_read = time.monotonic()
        self._took_all = False                  # the last _admit filled its room (more prompts may wait)
        # set by the watches below once they have marked a grown prompt stream or read a new version: an
        # idle actor waits on it (cleared at each iteration's start, so nothing after that is missed)
        self._wake = threading.Event()
        # read a prompt stream only when it grew (or on the timer below): not twice per engine step
        self.prompt_watch = StreamWatch(self.buffer.client, [self.eval_buffer.keys.prompts, self.buffer.keys.prompts],
                                        on_grow=self._wake.set)
        self._full: set[str] = set()            # prompt streams whose last read filled its count
        self._last_take = 0.0
        # the newest published version without a round trip
        self.versions = self.buffer.watch_version(on_change=self._wake.set)
        self.transport.attach(actor_id, self.llm, keepalive=self._heartbeat)
        self.sync_weights(force=True)  # a restarted actor rejoins at the current version
        freeze_startup_heap()          # no full collection walks the engine and libraries mid-step

    # ---- control (called from other threads: the Ray actor runs with max_concurrency > 1)
    def stop(self) -> None:
        self._stop.set()
        self._wake.set()                        # an idle actor's wait ends now

    def status(self) -> dict:
        elapsed = max(time.monotonic() - self.stats.started, 1e-9)
        return {"actor_id": self.actor_id, "version": self.version, "pid": os.getpid(),
                "prompts_done": self.stats.prompts_done, "in_flight": len(self._in_flight), "held": len(self._held),
                "scoring": len(self._scoring), "tokens_per_s": self.stats.tokens_generated / elapsed,
                "weight_loads": self.stats.weight_loads, "last_error": self.stats.last_error,
                "time": time.time()}

    def weights_checksum(self) -> float:
        with self._engine_lock:
            return self.llm.collective_rpc("lagrl_weights_checksum")[0]

    def param_checksums(self) -> dict[str, float]:
        """Engine rank 0's float64 sum of each materialised parameter, by vLLM name."""
        with self._engine_lock:
            return self.llm.collective_rpc("lagrl_param_checksums")[0]

    def engine_pids(self) -> list[int]:
        """The engine's own processes (empty when its core runs in this one)."""
        from actors.engine import engine_pids

        return engine_pids()

    # ---- weights
    def sync_weights(self, force: bool = False) -> int:
        """Load what the transport has due (the buffer's version when it is newer than the engine's;
        a collective send naming this actor); returns the version the engine holds."""
        published = self._published(fresh=force)
        try:
            with self._engine_lock:
                loaded = self.transport.poll(self.llm, self.version, published, force=force)
        except Exception as exc:
            # The published weights are gone: a learner killed with its job published them and
            # its restarted incarnation, resumed from an older checkpoint, is retraining up to
            # that version (it republishes it then). Or a collective receive lost a member; the
            # learner sends again. Keep the current weights and retry.
            self.stats.last_error = f"weights {published[1]} not loadable: {type(exc).__name__}: {exc}"[:500]
            time.sleep(0.5)
            return self.version
        self._loaded(loaded)
        return self.version

    def _published(self, fresh: bool = False) -> tuple[int, str]:
        """(version, location) the learner published last: the watch's copy, re-read from Redis every
        second as well (the watch thread may be between reconnects after a Redis restart)."""
        now = time.monotonic()
        if fresh or now - self._last_version_read > 1.0:
            self._last_version_read = now
            return self.versions.refresh()
        return self.versions.latest()

    def _loaded(self, version: int) -> None:
        if version != self.version:
            self.version = version
            self._loaded_at = time.time()
            self.stats.weight_loads += 1

    def load_version(self, version: int) -> bool:
        """Load exactly ``version`` (older than the newest, for a pinned prompt); False when the
        transport does not have it (yet): a resumed learner republishes the versions pinned
        prompts need (``learner.lagged_weights``)."""
        if version == self.version:
            return True
        try:
            with self._engine_lock:
                self.transport.load_into(self.llm, self.transport.location_for(version))
        except Exception as exc:
            self.stats.last_error = f"pinned version {version} not loadable: {type(exc).__name__}: {exc}"[:500]
            time.sleep(0.5)
            return False
        self._loaded(version)
        return True

    def _pinned_busy(self) -> bool:
        """A pinned request runs, or a pinned prompt waits: the weights are the pins' to choose."""
        return any(j.prompt.pin_version is not None for j in self._in_flight.values()) or \
            any(h.prompt.pin_version is not None for h in self._held)

    # ---- main loop
    def run(self) -> dict:
        from vllm import SamplingParams  # noqa: F401  (engine env is set up by now)

        while not self._stop.is_set():
            try:
                self._iteration()
            except Exception as exc:  # keep the actor alive; the error is visible in the heartbeat
                self.stats.last_error = f"{type(exc).__name__}: {exc}"[:500]
                traceback.print_exc()
                if type(exc).__name__ == "EngineDeadError":
                    # the engine core process is gone: exit, so Ray restarts the actor with a new engine
                    self._heartbeat(force=True)
                    os._exit(1)
                time.sleep(1.0)
        self._drain()
        self.versions.stop()
        self.prompt_watch.stop()
        self._heartbeat(force=True)
        self._close_engine()
        self._sweep_staged()
        return self.status()

    def _sweep_staged(self) -> None:
        """Remove the weight copies dead writers on this node left staged (an actor killed mid-load)."""
        from actors.transport.staging import sweep

        try:
            sweep()
        except Exception as exc:
            print(f"[lagrl] {self.actor_id}: sweeping staged weights failed: {type(exc).__name__}: {exc}", flush=True)

    def _close_engine(self) -> None:
        """After the last iteration: shut the engine down cleanly, so an out-of-process engine core and
        its workers exit now and remove their shared-memory queues (Ray kills what an actor leaves
        running when it is killed, and a killed engine leaves them in /dev/shm)."""
        try:
            with self._engine_lock:
                self.engine.engine_core.shutdown()
        except Exception as exc:
            print(f"[lagrl] {self.actor_id}: engine shutdown failed: {type(exc).__name__}: {exc}", flush=True)

    def _iteration(self) -> None:
        self._wake.clear()
        now = time.monotonic()
        # a newer version (the watch saw it: no round trip), the transport's own cadence (a collective
        # send names this actor), or nothing running: look now
        due = (self._published()[0] > self.version or now - self._last_version_check > 0.05
               or not self._in_flight or not self.transport.consistent)
        if due and not self._pinned_busy():      # pinned prompts choose the weights (module docstring)
            self._last_version_check = now
            self.sync_weights()
        if not self.transport.consistent:   # a receive failed mid-way: no token from mixed weights
            self._heartbeat()
            time.sleep(0.05)
            return
        idle = not self._in_flight and not self._scoring
        self._admit()
        if self.engine.has_unfinished_requests():
            with self._engine_lock:
                outputs = self.engine.step()
            finished = [self._finish(out) for out in outputs if out.finished]
            self._submit_scoring([job for job in finished if job is not None])   # None: dead-lettered
        self._flush_scored(block=False)
        self._heartbeat()
        if not self._in_flight:
            self._wait_for_work(idle)

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
        if self._scoring:
            self._scoring.wait(0.01)
            return
        if not idle:
            return
        due = self._published()[0] > self.version and not self._pinned_busy()
        if self._took_all or any(self._servable(h.prompt) for h in self._held):
            return
        if due and self.transport.pushes:
            self.transport.wait_for_send(0.02)
            return
        self._wake.wait(0.02 if due else self.cfg.idle_poll_ms / 1000)

    def _admit(self) -> None:
        """Take prompts while there is room."""
        self._start_held()
        busy = len(self._in_flight) + len(self._scoring)
        room = self.cfg.max_prompts_in_flight - busy - len(self._held)
        if room <= 0 and not busy:
            # only prompts held for a version not yet published: keep reading, a prompt servable now (a
            # replacement for the current step) may be queued behind them; else the step never completes
            room = self.cfg.max_prompts_in_flight
        self._took_all = False
        if room <= 0:
            return
        # Evaluation prompts first (a handful, and a blocked evaluation stalls the driver). Never blocking:
        # an idle actor waits for any new prompt or version afterwards (_wait_for_work). A stream is read
        # when it grew, when its last read filled its count, and every TAKE_EVERY_S (the reclaim of a dead
        # actor's prompts appends nothing; StreamWatch's docstring)
        now = time.monotonic()
        read_all = now - self._last_take >= TAKE_EVERY_S
        if read_all:
            self._last_take = now
        taken = []
        for buffer in (self.eval_buffer, self.buffer):
            key, want = buffer.keys.prompts, room - len(taken)
            if want <= 0:
                break                  # before grew(), which clears the mark: the stream is read next time
            if not (self.prompt_watch.grew(key) or key in self._full or read_all):
                continue
            got = buffer.take_prompts(self.actor_id, count=want, block_ms=0)
            self._full.discard(key)
            if len(got) >= want:
                self._full.add(key)
            taken += [(buffer, e, p) for e, p in got]
        taken_at = time.time()
        self._took_all = len(taken) >= room           # more may be queued: read again before waiting
        for buffer, entry_id, prompt in taken:
            if len(prompt.prompt_ids) + prompt.max_tokens > self.cfg.max_model_len:   # the feeder's rule
                buffer.reject_prompt(entry_id, self.actor_id, "prompt_too_long", detail=(
                    f"{prompt.prompt_id}: {len(prompt.prompt_ids)} prompt + {prompt.max_tokens} response "
                    f"tokens > max_model_len {self.cfg.max_model_len}"))
                continue
            if prompt.pin_version is not None and not callable(getattr(self.transport, "location_for", None)):
                buffer.reject_prompt(entry_id, self.actor_id, "pinned_version_unsupported", detail=(
                    f"{prompt.prompt_id}: pinned to version {prompt.pin_version}, but the "
                    f"{type(self.transport).__name__} serves only the newest version: run fixed lag with "
                    "--actors.weight_transport ray"))
                continue
            self._held.append(_Held(buffer, entry_id, prompt, {"issued": entry_time(entry_id), "taken": taken_at}))
        self._start_held()

    def _servable(self, prompt: PromptMsg) -> bool:
        """The engine's weights are the ones this prompt may start on."""
        if prompt.pin_version is not None:
            return prompt.pin_version == self.version
        return self.version >= prompt.min_version

    def _start_held(self) -> None:
        """Start every held prompt the current weights can serve; when none runs pinned, move the
        weights to what the oldest waiting prompt needs and start those too."""
        while self._held:
            waiting = []
            for h in self._held:
                if not self._servable(h.prompt):
                    waiting.append(h)
                    continue
                try:
                    self._start(h.buffer, h.entry_id, h.prompt, h.trace)
                except ValueError as exc:   # vLLM refuses the request (e.g. a token id outside the vocabulary)
                    h.buffer.reject_prompt(h.entry_id, self.actor_id, "engine_rejected",
                                           detail=f"{h.prompt.prompt_id}: {exc}"[:2000])
            self._held = waiting
            if not waiting:
                return
            # the oldest version first: the learner trains the oldest step next; a version not
            # (yet) loadable, e.g. one a resumed learner has still to retrain, blocks no older one
            first = min(waiting, key=lambda h: _target(h.prompt)).prompt
            target = _target(first)
            if not self._may_load(target):
                return                       # e.g. a pinned request runs: its weights stay until it finished
            # pinned: load that (older) version; else the published one, if it is new enough (no wait:
            # a prompt may be issued before its version is published, and held until it is)
            moved = self.load_version(target) if first.pin_version is not None else self.sync_weights() >= target
            if not moved and first.pin_version is not None and self._drop_if_gone(target):
                continue
            if not moved or self._stop.is_set():
                return

    def _drop_if_gone(self, version: int) -> bool:
        """Dead-letter the held prompts pinned to ``version`` if the transport will never have it again
        (older than every version it keeps: a group from it would be staler than the fixed lag and
        dropped by the learner anyway). Not yet there (a resumed learner republishes it) is no reason."""
        kept = self.transport.versions() if callable(getattr(self.transport, "versions", None)) else []
        if not kept or version >= min(kept):
            return False
        gone = [h for h in self._held if h.prompt.pin_version == version]
        for h in gone:
            h.buffer.reject_prompt(h.entry_id, self.actor_id, "stale", detail=(
                f"{h.prompt.prompt_id}: pinned to version {version}, older than every version the weight "
                f"transport keeps ({kept}); its group would be staler than the fixed lag"))
        self._held = [h for h in self._held if h.prompt.pin_version != version]
        return True

    def _may_load(self, version: int) -> bool:
        """Weights of ``version`` may replace the engine's now: no pinned request runs (its responses
        must come from one version) and none in flight asked for a newer version than that."""
        return all(j.prompt.pin_version is None and j.prompt.min_version <= version for j in self._in_flight.values())

    def _start(self, buffer, entry_id: str, prompt: PromptMsg, trace: dict[str, float]) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: one output per prompt once all n samples finished (as LLM.generate does).
        # detokenize=False: vLLM would decode every sampled token as it comes, twice (the text and each
        # log-prob's token), on the engine loop's thread; a scoring thread decodes each response once
        # (_score). No stop strings are used, so nothing needs the text while generating.
        params = SamplingParams(n=prompt.n_samples, temperature=prompt.temperature,
                                top_p=self.cfg.top_p, max_tokens=prompt.max_tokens, logprobs=0,
                                output_kind=RequestOutputKind.FINAL_ONLY, detokenize=False)
        request_id = f"{prompt.prompt_id}@{self.actor_id}"
        with self._engine_lock:
            self.engine.add_request(request_id, {"prompt_token_ids": prompt.prompt_ids.tolist(),
                                                 "cache_salt": _cache_salt(self.version)}, params)
        now = time.time()
        self._in_flight[request_id] = _InFlight(buffer, entry_id, prompt, self.version, now,
                                                {**trace, "loaded": self._loaded_at, "started": now})

    def _finish(self, out) -> Scoring | None:
        """The finished request's group, to be scored; None when its output cannot be read (its prompt is
        dead-lettered, and the engine step's other groups go on)."""
        job = self._in_flight.pop(out.request_id)
        try:
            return self._group_of(job, out)
        except Exception as exc:  # noqa: BLE001 (one unreadable output must not take its step-mates along)
            detail = f"{job.prompt.prompt_id}: {type(exc).__name__}: {exc}"[:2000]
            self.stats.last_error = f"engine_output: {detail}"[:500]
            job.buffer.reject_prompt(job.entry_id, self.actor_id, "engine_output", detail=detail)
            return None

    def _group_of(self, job: _InFlight, out) -> Scoring:
        responses = []
        for c in out.outputs:
            ids = np.asarray(c.token_ids, dtype=np.int32)
            lps = np.asarray([step[tid].logprob for step, tid in zip(c.logprobs, c.token_ids)],
                             dtype=np.float32)
            responses.append(Response(token_ids=ids, logprobs=lps, finish_reason=c.finish_reason or "abort",
                                      version_start=job.version_start, version_end=self.version))
            self.stats.tokens_generated += len(ids)
        p = job.prompt
        now = time.time()
        group = Group(group_id=p.prompt_id, prompt_id=p.prompt_id, data_source=p.data_source,
                      step=p.step, stage=p.stage, max_tokens=p.max_tokens, prompt_ids=p.prompt_ids, answer=p.answer,
                      responses=responses, actor_id=self.actor_id, created_at=job.taken_at,
                      finished_at=now, trace={**job.trace, "generated": now})
        return Scoring(job.buffer, job.entry_id, group)

    def _submit_scoring(self, finished: list[Scoring]) -> None:
        calls = scoring_calls([job.group for job in finished], self._scoring_width, self._reward_cfg)
        self._scoring.add([[finished[i] for i in call] for call in calls])

    def _score(self, groups: list[Group]) -> tuple[list, float]:
        """(per group its results or the exception its scoring raised, the unix time they came back). The
        text scored is what vLLM's detokenizer gives for those tokens (special tokens skipped; equal on
        3200 tiny samples)."""
        from rewards.result import ScoreRequest

        requests = [ScoreRequest(self._tokenizer.batch_decode([r.token_ids.tolist() for r in g.responses],
                                                              skip_special_tokens=True), g.answer, g.data_source)
                    for g in groups]
        if self.scorer is None:   # in-process scoring (tests, single-process tools)
            from rewards.scoring import score_requests
            results = score_requests(requests)
        else:
            results = self.scorer.score_many(requests)
        return results, time.time()

    def _flush_scored(self, block: bool) -> None:
        """Store the scored groups, dead-letter those whose reward failed (all of them when ``block``)."""
        self.stats.prompts_done += self._scoring.flush(block)

    def _note(self, error: str) -> None:
        self.stats.last_error = error[:500]

    def _drain(self) -> None:
        """On stop: abort unfinished requests (their prompts stay pending for reclaim, as do held
        ones), store scored ones."""
        if self._in_flight:
            with self._engine_lock:
                self.engine.abort_request(list(self._in_flight))
            self._in_flight.clear()
        self._held.clear()
        self._flush_scored(block=True)

    def _heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_beat >= self.cfg.heartbeat_s:
            self._last_beat = now
            self.buffer.heartbeat(self.actor_id, self.status())
            # Working is not dying: reset the idle time of our prompts so no other actor reclaims them.
            for buffer in (self.buffer, self.eval_buffer):
                held = [j.entry_id for j in [*self._in_flight.values(), *self._scoring, *self._held]
                        if j.buffer is buffer]
                if held:
                    buffer.touch_prompts(self.actor_id, held)


def scoring_calls(groups: list[Group], width: int, cfg: RewardConfig) -> list[list[int]]:
    """The reward calls for the groups one engine step finished, as lists of their indices. Math groups
    share at most ``width`` calls (the pool's workers): groups finish in bursts at the end of a batch, and
    a call per group cost ~2 ms of CPU on each side, more than math-verify takes for a small group; up to
    ``width`` they still go one per call. A group that may run code goes alone: its sandboxes may take
    seconds, and a call returns all its groups at once."""
    code = [may_run_code(g.answer, g.data_source, cfg) for g in groups]
    alone = [i for i, is_code in enumerate(code) if is_code]
    math = [i for i, is_code in enumerate(code) if not is_code]
    width = min(len(math), width)
    return [[i] for i in alone] + [math[k::width] for k in range(width)]


TAKE_EVERY_S = 0.2     # an actor reads its prompt streams at least this often, whether they grew or not


def _cache_salt(version: int) -> str:
    """vLLM's prefix cache keys a prompt's KV blocks by this too: blocks computed by other weights never
    match. (Resetting the cache at each load walked every KV block: ~60-90 ms a version on an H100
    holding a small model's cache, on the critical path of every step.)"""
    return f"weights-v{version}"


def _target(prompt: PromptMsg) -> int:
    """The version a held prompt waits for: its pin, or at least its min_version."""
    return prompt.pin_version if prompt.pin_version is not None else prompt.min_version


GenerationActor = ray.remote(GenerationActorImpl)
