"""How a metric combines: across micro-batches and ranks, then across a step's updates.

One rule for every key, by its name: ``.../max`` keys take the max, ``.../min`` keys the min,
count keys (``tokens/count``, a lag bucket's ``lagbucket/<b>/tokens``) add up, and everything
else is a per-token value.

* Within one optimizer update, every micro-batch of every rank reports ``sum / T_global``
  (``learner.loss`` convention), so per-token values simply add up (:func:`reduce_metrics`).
* Across the N_SGD updates of a learner step, per-token values are the token-weighted mean
  sum_u value_u T_u / sum_u T_u (:func:`combine_updates`); with N_SGD = 1 that is the exact mean
  over the step's tokens, e.g. the entropy the entropy controller reads. A step without any
  trained token has no such mean: NaN, never 0 (an entropy of 0 would read as a collapse).
* Per-lag-bucket values (``lagbucket/<b>/...``, ``learner.lag.lag_bucket_stats``) follow the
  same sum/T convention up to the step, then become means over the bucket's own tokens:
  value x T / n_b, with n_b the bucket's token count summed over the step.
* The mismatch KL also keeps its first update's value as ``mismatch/start_kl_k3`` (and ``_k1``): in
  that update the learner still has the step's starting weights, so it measures behaviour vs
  learner alone; the step mean also holds the learner's own movement over its N_SGD updates.
"""

from __future__ import annotations

from typing import Iterable, Literal, Sequence

COUNT_KEYS = frozenset({"tokens/count"})
BUCKET_PREFIX = "lagbucket/"    # per-lag-bucket keys (learner.lag.lag_bucket_stats)
STEP_START_KEYS = {"mismatch/kl_k3": "mismatch/start_kl_k3", "mismatch/kl_k1": "mismatch/start_kl_k1"}


def reduce_op(key: str) -> Literal["max", "min", "sum"]:
    """max for ``/max`` keys, min for ``/min`` keys, sum for everything else."""
    return "max" if key.endswith("/max") else "min" if key.endswith("/min") else "sum"


def is_count(key: str) -> bool:
    """Counts add up over micro-batches, ranks and updates (not token-weighted)."""
    return key in COUNT_KEYS or (key.startswith(BUCKET_PREFIX) and key.endswith("/tokens"))


def _bucket_count_key(key: str) -> str | None:
    """``lagbucket/<b>/tokens`` for a per-token value of bucket b; None for any other key."""
    if not key.startswith(BUCKET_PREFIX) or is_count(key):
        return None
    label = key[len(BUCKET_PREFIX):].split("/", 1)[0]
    return f"{BUCKET_PREFIX}{label}/tokens"


def _combine(op: str, a: float, b: float) -> float:
    return max(a, b) if op == "max" else min(a, b) if op == "min" else a + b


def reduce_metrics(metrics: Iterable[dict[str, float]]) -> dict[str, float]:
    """Per-micro-batch (or per-rank) metric dicts -> the update's values."""
    out: dict[str, float] = {}
    for m in metrics:
        for k, v in m.items():
            out[k] = v if k not in out else _combine(reduce_op(k), out[k], v)
    return out


def combine_updates(per_update: Sequence[dict[str, float]], tokens: Sequence[float]) -> dict[str, float]:
    """The step's values from its updates' (``tokens[u]`` = T_u, the update's loss tokens)."""
    total = float(sum(tokens))
    out: dict[str, float] = {}
    for k in sorted({k for m in per_update for k in m}):
        vals = [(m[k], t) for m, t in zip(per_update, tokens) if k in m]
        op = reduce_op(k)
        if op != "sum" or is_count(k):
            out[k] = reduce_metrics({k: v} for v, _ in vals)[k]
        else:
            out[k] = sum(v * t for v, t in vals) / total if total > 0 else float("nan")
    for k in list(out):
        count_key = _bucket_count_key(k)
        if count_key is not None and reduce_op(k) == "sum":
            n = out.get(count_key, 0.0)
            out[k] = out[k] * total / n if n > 0 else float("nan")    # sum_b / T  ->  sum_b / n_b
    for k, start_key in STEP_START_KEYS.items():
        if per_update and k in per_update[0]:
            out[start_key] = per_update[0][k]
    return out
