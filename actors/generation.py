"""GenerationActor: a long-running Ray actor that owns one vLLM engine and feeds the buffer.

Loop (one iteration per engine step):
  1. weights: if the buffer's version is newer than the engine's, fetch and load it in place
     (between engine steps, so requests in flight continue on the new weights and record
     `version_end > version_start` instead of hiding the swap);
  2. admission: take prompts from the `prompts` consumer group while fewer than
     `max_prompts_in_flight` are in the engine; a prompt starts only once the engine runs
     weights of at least its `min_version` (strict on-policy: exactly its step's version);
  3. one `LLMEngine.step()` (continuous batching over every request in flight);
  4. finished groups go to the reward pool (in a thread, so scoring overlaps generation), and
     scored groups are written to `groups` together with the ACK of their prompt (one Redis
     transaction: a prompt is acknowledged iff its group is stored).
A prompt taken but not finished when the actor dies stays pending in Redis and is reclaimed by
another actor after `reclaim_idle_ms`; Ray restarts the actor and re-runs `run()`.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import ray

from actors.config import ActorConfig
from buffer.codec import encode_group
from buffer.messages import Group, PromptMsg, Response


@dataclass
class _InFlight:
    buffer: object            # the RunBuffer the prompt came from (training or evaluation)
    entry_id: str
    prompt: PromptMsg
    version_start: int
    taken_at: float


@dataclass
class _Scoring:
    buffer: object
    entry_id: str
    group: Group
    future: Future


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
        self.version = 0
        self._prefix_cache_dirty = False
        self._stop = threading.Event()
        self._in_flight: dict[str, _InFlight] = {}
        self._scoring: list[_Scoring] = []
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"{actor_id}-reward")
        self.stats = _Stats()
        self._last_beat = 0.0
        self._last_version_check = 0.0
        self.transport.attach(actor_id, self.llm, keepalive=self._heartbeat)
        self.sync_weights(force=True)  # a restarted actor rejoins at the current version

    # ---- control (called from other threads: the Ray actor runs with max_concurrency > 1)
    def stop(self) -> None:
        self._stop.set()

    def status(self) -> dict:
        elapsed = max(time.monotonic() - self.stats.started, 1e-9)
        return {"actor_id": self.actor_id, "version": self.version, "pid": os.getpid(),
                "prompts_done": self.stats.prompts_done, "in_flight": len(self._in_flight),
                "scoring": len(self._scoring), "tokens_per_s": self.stats.tokens_generated / elapsed,
                "weight_loads": self.stats.weight_loads, "last_error": self.stats.last_error,
                "time": time.time()}

    def weights_checksum(self) -> float:
        return self.llm.collective_rpc("lagrl_weights_checksum")[0]

    # ---- weights
    def sync_weights(self, force: bool = False) -> int:
        """Load what the transport has due (the buffer's version when it is newer than the engine's;
        a collective send naming this actor); returns the version the engine holds."""
        published = self.buffer.get_version()
        try:
            loaded = self.transport.poll(self.llm, self.version, published, force=force)
        except Exception as exc:
            # The published weights are gone: a learner killed with its job published them and
            # its restarted incarnation, resumed from an older checkpoint, is retraining up to
            # that version (it republishes it then). Or a collective receive lost a member; the
            # learner sends again. Keep the current weights and retry.
            self.stats.last_error = f"weights {published[1]} not loadable: {type(exc).__name__}: {exc}"[:500]
            time.sleep(0.5)
            return self.version
        if loaded != self.version:
            self.version = loaded
            self.stats.weight_loads += 1
            self._prefix_cache_dirty = True
        if self._prefix_cache_dirty:
            # Cached prompt KV was computed by the old weights; vLLM refuses while requests run,
            # so retry every iteration until it succeeds.
            self._prefix_cache_dirty = not self.llm.reset_prefix_cache()
        return self.version

    # ---- main loop
    def run(self) -> dict:
        from vllm import SamplingParams  # noqa: F401  (engine env is set up by now)

        while not self._stop.is_set():
            try:
                self._iteration()
            except Exception as exc:  # keep the actor alive; the error is visible in the heartbeat
                self.stats.last_error = f"{type(exc).__name__}: {exc}"[:500]
                traceback.print_exc()
                time.sleep(1.0)
        self._drain()
        self._heartbeat(force=True)
        return self.status()

    def _iteration(self) -> None:
        now = time.monotonic()
        if now - self._last_version_check > 0.05 or not self._in_flight or not self.transport.consistent:
            self._last_version_check = now
            self.sync_weights()
        if not self.transport.consistent:   # a receive failed mid-way: no token from mixed weights
            self._heartbeat()
            time.sleep(0.05)
            return
        self._admit()
        if self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    self._finish(out)
        self._flush_scored(block=False)
        self._heartbeat()

    def _admit(self) -> None:
        room = self.cfg.max_prompts_in_flight - len(self._in_flight) - len(self._scoring)
        if room <= 0:
            return
        idle = not self._in_flight and not self._scoring
        # Evaluation prompts first (a handful, and a blocked evaluation stalls the driver), never blocking.
        taken = [(self.eval_buffer, e, p) for e, p in self.eval_buffer.take_prompts(self.actor_id, room, 0)]
        taken += [(self.buffer, e, p) for e, p in self.buffer.take_prompts(
            self.actor_id, count=room - len(taken), block_ms=self.cfg.idle_poll_ms if idle and not taken else 0)]
        for buffer, entry_id, prompt in taken:
            if len(prompt.prompt_ids) + prompt.max_tokens > self.cfg.max_model_len:   # the feeder's rule
                buffer.reject_prompt(entry_id, self.actor_id, "prompt_too_long", detail=(
                    f"{prompt.prompt_id}: {len(prompt.prompt_ids)} prompt + {prompt.max_tokens} response "
                    f"tokens > max_model_len {self.cfg.max_model_len}"))
                continue
            if prompt.min_version > self.version:
                self._wait_for_version(prompt.min_version)
            try:
                self._start(buffer, entry_id, prompt)
            except ValueError as exc:     # vLLM refuses the request (e.g. a token id outside the vocabulary)
                buffer.reject_prompt(entry_id, self.actor_id, "engine_rejected",
                                     detail=f"{prompt.prompt_id}: {exc}"[:2000])

    def _wait_for_version(self, at_least: int) -> None:
        """The feeder only releases a prompt once its version is published, so this is short."""
        while self.sync_weights() < at_least and not self._stop.is_set():
            self._heartbeat()
            if self.buffer.wait_for_version(at_least, timeout_s=1.0) >= at_least:
                time.sleep(0.02)    # published, not loaded yet (a collective sends it shortly)

    def _start(self, buffer, entry_id: str, prompt: PromptMsg) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: one output per prompt once all n samples finished (as LLM.generate does).
        params = SamplingParams(n=prompt.n_samples, temperature=prompt.temperature,
                                top_p=self.cfg.top_p, max_tokens=prompt.max_tokens, logprobs=0,
                                output_kind=RequestOutputKind.FINAL_ONLY)
        request_id = f"{prompt.prompt_id}@{self.actor_id}"
        self.engine.add_request(request_id, {"prompt_token_ids": prompt.prompt_ids.tolist()}, params)
        self._in_flight[request_id] = _InFlight(buffer, entry_id, prompt, self.version, time.time())

    def _finish(self, out) -> None:
        job = self._in_flight.pop(out.request_id)
        responses = []
        for c in out.outputs:
            ids = np.asarray(c.token_ids, dtype=np.int32)
            lps = np.asarray([step[tid].logprob for step, tid in zip(c.logprobs, c.token_ids)],
                             dtype=np.float32)
            responses.append(Response(token_ids=ids, logprobs=lps, finish_reason=c.finish_reason or "abort",
                                      version_start=job.version_start, version_end=self.version))
            self.stats.tokens_generated += len(ids)
        p = job.prompt
        group = Group(group_id=p.prompt_id, prompt_id=p.prompt_id, data_source=p.data_source,
                      step=p.step, stage=p.stage, max_tokens=p.max_tokens, prompt_ids=p.prompt_ids, answer=p.answer,
                      responses=responses, actor_id=self.actor_id, created_at=job.taken_at,
                      finished_at=time.time())
        texts = [c.text for c in out.outputs]
        future = self._pool.submit(self._score, texts, p.answer, p.data_source)
        self._scoring.append(_Scoring(job.buffer, job.entry_id, group, future))

    def _score(self, texts: list[str], answer: str, data_source: str) -> list:
        if self.scorer is None:   # in-process scoring (tests, single-process tools)
            from rewards.scoring import score_group
            return score_group(texts, answer, data_source)
        return self.scorer.score(texts, answer, data_source)

    def _flush_scored(self, block: bool) -> None:
        remaining = []
        for job in self._scoring:
            if not (block or job.future.done()):
                remaining.append(job)
                continue
            try:
                results = job.future.result()
                if len(results) != len(job.group.responses):
                    raise ValueError(f"{len(results)} rewards for {len(job.group.responses)} responses")
            except Exception as exc:
                # The scorers turn bad answers into reasons; an exception here is the reward system
                # failing (e.g. a worker dead past its retries). The group cannot be judged: its prompt
                # is dead-lettered (counted, with the group as raw) rather than trained on a fake 0.
                detail = f"group {job.group.group_id}: {type(exc).__name__}: {exc}"[:2000]
                self.stats.last_error = f"reward_error: {detail}"[:500]
                job.buffer.reject_prompt(job.entry_id, "reward", "reward_error", detail=detail,
                                         raw=encode_group(job.group))
                continue
            for resp, result in zip(job.group.responses, results):
                resp.reward = float(result.reward)
                resp.reward_info = {"reason": result.reason, "extracted": result.extracted}
            job.buffer.put_group(job.group, job.entry_id)
            self.stats.prompts_done += 1
        self._scoring = remaining

    def _drain(self) -> None:
        """On stop: abort unfinished requests (their prompts stay pending for reclaim), store scored ones."""
        if self._in_flight:
            self.engine.abort_request(list(self._in_flight))
            self._in_flight.clear()
        self._flush_scored(block=True)

    def _heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_beat >= self.cfg.heartbeat_s:
            self._last_beat = now
            self.buffer.heartbeat(self.actor_id, self.status())
            # Working is not dying: reset the idle time of our prompts so no other actor reclaims them.
            for buffer in (self.buffer, self.eval_buffer):
                held = [j.entry_id for j in [*self._in_flight.values(), *self._scoring] if j.buffer is buffer]
                if held:
                    buffer.touch_prompts(self.actor_id, held)


GenerationActor = ray.remote(GenerationActorImpl)
