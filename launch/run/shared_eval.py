"""The step-0 evaluation shared by the runs of one report: the arms of a comparison start from the same
weights, so their first evaluation is the same measurement; it is made once and read by the others.

A run takes part when ``LAGRL_SHARED_EVAL`` names its report (the science report's jobs set it,
``launch.experiments.science.jobs``). Its first evaluation (step 0, version 0) is looked up on the
report's shelf (a named, detached Ray actor, :class:`EvalShelf`, in the cluster every run joins) under a
key that pins everything the numbers depend on (:func:`evaluation_key`): the weights' hash (every file
of the model directory, read), the evaluation's prompts (their token ids), the run's seed (the actors
sample with seed + actor index) and temperature, n, the response budget, the probe's settings (its
entropies are the learner's: its dtype and packing too) and the actors' settings. A
run finding its key there writes that row as its own (marked ``eval/shared`` 1); otherwise it evaluates
and puts its row there. Two arms evaluating at the same moment both compute (the first row stays). The
shelf leaves by itself after ``IDLE_S`` without a call.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from functools import lru_cache
from pathlib import Path

import ray

SHARED_EVAL_ENV = "LAGRL_SHARED_EVAL"
NAMESPACE = "lagrl-shared-evals"
IDLE_S = 3600.0


@ray.remote(num_cpus=0, max_concurrency=4)
class EvalShelf:
    """Step-0 evaluation rows by key, for one report."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.last = time.monotonic()
        self.lock = threading.Lock()
        # its own thread, not a method call: a call that never returns would hold one of the actor's
        # max_concurrency slots, and a few such calls would leave none for get and put
        threading.Thread(target=self._leave_when_idle, daemon=True, name="eval-shelf-idle").start()

    def get(self, key: str) -> dict | None:
        self.last = time.monotonic()
        return self.rows.get(key)

    def put(self, key: str, row: dict) -> None:
        with self.lock:
            self.last = time.monotonic()
            self.rows.setdefault(key, row)

    def _leave_when_idle(self) -> None:
        """Once the shelf has been idle IDLE_S, the actor ends (it is detached: nothing else would end it)."""
        while time.monotonic() - self.last < IDLE_S:
            time.sleep(min(60.0, IDLE_S))
        ray.kill(ray.get_runtime_context().current_actor)


def shelf():
    """This report's shelf (made by the first run that asks), or None when the run is not part of a report."""
    name = os.environ.get(SHARED_EVAL_ENV)
    if not name:
        return None
    return EvalShelf.options(name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached").remote()


@lru_cache(maxsize=8)
def weights_hash(model_dir: str) -> str:
    """SHA-256 over every file of the model directory (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(model_dir).rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(model_dir)).encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def evaluation_key(model_dir: str, prompt_ids: list[list[int]], cfg, max_tokens: int) -> str:
    """What a step-0 evaluation's numbers depend on, hashed."""
    parts = {"weights": weights_hash(model_dir), "prompts": prompt_ids, "seed": cfg.seed,
             "temperature": cfg.temperature, "eval_temperature": cfg.data.eval_temperature, "n": cfg.data.eval_n,
             "max_tokens": max_tokens,
             "probe": [cfg.data.probe_problems, cfg.data.probe_n, cfg.learner.dtype, cfg.learner.packing],
             "actors": cfg.actors.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def first_evaluation(compute, key: str) -> dict:
    """The step-0 row: this report's, when another run made it with the same key, else ``compute()``'s (shared)."""
    handle = shelf()
    if handle is None:
        return compute()
    row = ray.get(handle.get.remote(key))
    if row is not None:
        return {**row, "eval/shared": 1.0}
    row = compute()
    ray.get(handle.put.remote(key, row))
    return row
