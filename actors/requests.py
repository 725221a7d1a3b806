"""What runs in a generation actor's engine: prompts held for their weights, requests started, outputs
collected into groups.

A prompt starts only once the engine runs weights it may start on: at least its ``min_version``
(strict on-policy: exactly its step's version), or exactly its ``pin_version`` (fixed lag), which may be
older than the newest; the weights are then moved by version (``EngineWeights.load``). While a pinned
request runs, the weights never change, so its responses come from one version; prompts that need
other weights are held until then. Every request records the version it started on and the one it
finished on (``version_end``), so a response that straddles a load is visible.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from actors.bookkeeping import ActorStats
from actors.engine_weights import EngineWeights
from actors.scoring_book import Scoring
from buffer.messages import Group, PromptMsg, Response


class EngineStepFailed(RuntimeError):
    """The engine raised inside its step: its scheduler has already moved on, so the step's requests never
    finish (a stall, not an error, if the actor went on). The actor exits and Ray restarts it with a new
    engine; the prompts it held go back to the buffer for reclaim."""


@dataclass
class InFlight:
    buffer: object            # the RunBuffer the prompt came from (training or evaluation)
    entry_id: str
    prompt: PromptMsg
    version_start: int
    taken_at: float
    trace: dict[str, float] = field(default_factory=dict)   # Group.trace so far


@dataclass
class Held:
    """A prompt taken from the stream, waiting for the weights it must start on."""

    buffer: object
    entry_id: str
    prompt: PromptMsg
    trace: dict[str, float] = field(default_factory=dict)   # issued, taken (Group.trace)


class Requests:
    """The held prompts (oldest first) and the requests in the engine, by request id."""

    def __init__(self, actor_id: str, top_p: float, engine, engine_lock: threading.RLock, weights: EngineWeights,
                 stats: ActorStats, stop: threading.Event):
        self.actor_id, self.top_p, self.engine, self._engine_lock = actor_id, top_p, engine, engine_lock
        self.weights, self.stats, self._stop = weights, stats, stop
        self.in_flight: dict[str, InFlight] = {}
        self.held: list[Held] = []

    # ---- which weights
    def pinned_busy(self) -> bool:
        """A pinned request runs, or a pinned prompt waits: the weights are the pins' to choose."""
        return any(j.prompt.pin_version is not None for j in self.in_flight.values()) or \
            any(h.prompt.pin_version is not None for h in self.held)

    def servable(self, prompt: PromptMsg) -> bool:
        """The engine's weights are the ones this prompt may start on."""
        if prompt.pin_version is not None:
            return prompt.pin_version == self.weights.version
        return self.weights.version >= prompt.min_version

    def may_load(self, version: int) -> bool:
        """Weights of ``version`` may replace the engine's now: no pinned request runs (its responses
        must come from one version) and none in flight asked for a newer version than that."""
        return all(j.prompt.pin_version is None and j.prompt.min_version <= version for j in self.in_flight.values())

    def start_held(self) -> None:
        """Start every held prompt the current weights can serve; when none runs pinned, move the
        weights to what the oldest waiting prompt needs and start those too."""
        while self.held:
            waiting = []
            for h in self.held:
                if not self.servable(h.prompt):
                    waiting.append(h)
                    continue
                try:
                    self._start(h)
                except ValueError as exc:   # vLLM refuses the request (e.g. a token id outside the vocabulary)
                    h.buffer.reject_prompt(h.entry_id, self.actor_id, "engine_rejected",
                                           detail=f"{h.prompt.prompt_id}: {exc}"[:2000])
            self.held = waiting
            if not waiting:
                return
            # the oldest version first: the learner trains the oldest step next; a version not
            # (yet) loadable, e.g. one a resumed learner has still to retrain, blocks no older one
            first = min(waiting, key=lambda h: target(h.prompt)).prompt
            version = target(first)
            if not self.may_load(version):
                return                       # e.g. a pinned request runs: its weights stay until it finished
            # pinned: load that (older) version; else the published one, if it is new enough (no wait:
            # a prompt may be issued before its version is published, and held until it is)
            moved = self.weights.load(version) if first.pin_version is not None else self.weights.sync() >= version
            if not moved and first.pin_version is not None and self._drop_if_gone(version):
                continue
            if not moved or self._stop.is_set():
                return

    def _drop_if_gone(self, version: int) -> bool:
        """Dead-letter the held prompts pinned to ``version`` if the transport will never have it again
        (older than every version it keeps: a group from it would be staler than the fixed lag and
        dropped by the learner anyway). Not yet there (a resumed learner republishes it) is no reason."""
        kept = self.weights.kept()
        if not kept or version >= min(kept):
            return False
        gone = [h for h in self.held if h.prompt.pin_version == version]
        for h in gone:
            h.buffer.reject_prompt(h.entry_id, self.actor_id, "stale", detail=(
                f"{h.prompt.prompt_id}: pinned to version {version}, older than every version the weight "
                f"transport keeps ({kept}); its group would be staler than the fixed lag"))
        self.held = [h for h in self.held if h.prompt.pin_version != version]
        return True

    # ---- into the engine and out
    def _start(self, held: Held) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompt = held.prompt
        # FINAL_ONLY: one output per prompt once all n samples finished (as LLM.generate does).
        # detokenize=False: vLLM would decode every sampled token as it comes, twice (the text and each
        # log-prob's token), on the engine loop's thread; a scoring thread decodes each response once
        # (actors.reward_calls). No stop strings are used, so nothing needs the text while generating.
        params = SamplingParams(n=prompt.n_samples, temperature=prompt.temperature,
                                top_p=self.top_p, max_tokens=prompt.max_tokens, logprobs=0, seed=prompt.seed,
                                output_kind=RequestOutputKind.FINAL_ONLY, detokenize=False)
        request_id = f"{prompt.prompt_id}@{self.actor_id}"
        version = self.weights.version
        with self._engine_lock:
            self.engine.add_request(request_id, {"prompt_token_ids": prompt.prompt_ids.tolist(),
                                                 "cache_salt": cache_salt(version)}, params)
        now = time.time()
        self.in_flight[request_id] = InFlight(held.buffer, held.entry_id, prompt, version, now,
                                              {**held.trace, "loaded": self.weights.loaded_at, "started": now})

    def step(self) -> list[Scoring]:
        """One engine step when requests are unfinished: the groups it finished, to be scored."""
        if not self.engine.has_unfinished_requests():
            return []
        with self._engine_lock:
            try:
                outputs = self.engine.step()
            except Exception as exc:
                raise EngineStepFailed(f"{type(exc).__name__}: {exc}") from exc
        finished = [self._finish(out) for out in outputs if out.finished]
        return [job for job in finished if job is not None]      # None: dead-lettered

    def _finish(self, out) -> Scoring | None:
        """The finished request's group, to be scored; None when its output cannot be read (its prompt is
        dead-lettered, and the engine step's other groups go on)."""
        job = self.in_flight.pop(out.request_id)
        try:
            return self._group_of(job, out)
        except Exception as exc:  # noqa: BLE001 (one unreadable output must not take its step-mates along)
            detail = f"{job.prompt.prompt_id}: {type(exc).__name__}: {exc}"[:2000]
            self.stats.note(f"engine_output: {detail}")
            job.buffer.reject_prompt(job.entry_id, self.actor_id, "engine_output", detail=detail)
            return None

    def _group_of(self, job: InFlight, out) -> Scoring:
        responses = []
        for c in out.outputs:
            ids = np.asarray(c.token_ids, dtype=np.int32)
            lps = np.asarray([step[tid].logprob for step, tid in zip(c.logprobs, c.token_ids)],
                             dtype=np.float32)
            responses.append(Response(token_ids=ids, logprobs=lps, finish_reason=c.finish_reason or "abort",
                                      version_start=job.version_start, version_end=self.weights.version))
            self.stats.tokens_generated += len(ids)
        p = job.prompt
        now = time.time()
        group = Group(group_id=p.prompt_id, prompt_id=p.prompt_id, data_source=p.data_source,
                      step=p.step, stage=p.stage, max_tokens=p.max_tokens, prompt_ids=p.prompt_ids, answer=p.answer,
                      responses=responses, actor_id=self.actor_id, created_at=job.taken_at,
                      finished_at=now, trace={**job.trace, "generated": now})
        return Scoring(job.buffer, job.entry_id, group)

    def abort_all(self) -> None:
        """On stop: abort the unfinished requests and forget the held prompts (their prompts stay pending
        in the stream, to be reclaimed)."""
        if self.in_flight:
            with self._engine_lock:
                self.engine.abort_request(list(self.in_flight))
            self.in_flight.clear()
        self.held.clear()


def cache_salt(version: int) -> str:
    """vLLM's prefix cache keys a prompt's KV blocks by this too: blocks computed by other weights never
    match. (Resetting the cache at each load walked every KV block: ~60-90 ms a version on an H100
    holding a small model's cache, on the critical path of every step.)"""
    return f"weights-v{version}"


def target(prompt: PromptMsg) -> int:
    """The version a held prompt waits for: its pin, or at least its min_version."""
    return prompt.pin_version if prompt.pin_version is not None else prompt.min_version
