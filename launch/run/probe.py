"""The entropy probe: the policy's own entropy, measured the same way in every run (DESIGN.md §4).

At every evaluation point the version being evaluated samples ``data.probe_n`` responses at temperature 1
for the first ``data.probe_problems`` held-out problems (the same prompts in every arm and seed of a
world, each with a sampling seed of its own: equal weights give equal responses), and the learner computes
at every token of those responses the entropy of the full next-token distribution:

    probe/entropy               H(softmax(logits)), temperature 1: the mean over all the responses' tokens
    probe/entropy_sampling_tau  H(softmax(logits / tau)) at the run's sampling temperature, the same tokens
    probe/tokens, probe/responses, probe/seconds

The learner's ``entropy/mean`` is none of this: it is taken at the sampling temperature, over the tokens
a step trains (non-zero-advantage groups only, sampled up to max_lag versions earlier), averaged over the
step's updates while the weights move. The probe's tokens are sampled by the version it measures,
between steps, and every response counts; with temperature 1 fixed, two runs that sample at different
temperatures are measured on the same distribution.
"""

from __future__ import annotations

import time

import numpy as np

from learner.batching import Row

PROBE_TEMPERATURE = 1.0
PROBE_SEED = 1_000_003      # problem i is sampled with seed PROBE_SEED + i in every run: equal weights, equal responses


def probe_rows(groups) -> list[Row]:
    """Every non-empty response of ``groups`` as a learner row (nothing here is trained: no advantage)."""
    return [Row(prompt_ids=np.asarray(g.prompt_ids, dtype=np.int32), response_ids=np.asarray(r.token_ids, np.int32),
                old_logprobs=np.zeros(len(r.token_ids), np.float32), advantage=0.0, version_start=r.version_start,
                version_end=r.version_end, group_index=gi)
            for gi, g in enumerate(groups) for r in g.responses if len(r.token_ids)]


def token_mean(per_row: list[np.ndarray]) -> float:
    """The mean over every token of every row (a long response weighs by its length, as in the loss)."""
    return float(np.concatenate(per_row).mean()) if per_row else float("nan")


def measure_probe(evaluator, learner, *, step: int, max_tokens: int) -> dict:
    """The probe row of the learner's current version (the module docstring), on ``evaluator``'s probe
    problems, ``probe_n`` responses each, with the run's sampling temperature its ``temperature``."""
    start = time.monotonic()
    problems, tau = evaluator.probe_problems, evaluator.temperature
    groups = evaluator.sample(problems, n=evaluator.probe_n, temperature=PROBE_TEMPERATURE, version=learner.version,
                              step=step, max_tokens=max_tokens, kind="probe", seed=PROBE_SEED)
    rows = probe_rows(groups)
    at_one = learner.token_entropies(rows, PROBE_TEMPERATURE)
    at_tau = at_one if tau == PROBE_TEMPERATURE else learner.token_entropies(rows, tau)
    return {"probe/entropy": token_mean(at_one), "probe/entropy_sampling_tau": token_mean(at_tau),
            "probe/tokens": float(sum(len(e) for e in at_one)), "probe/responses": float(len(rows)),
            "probe/problems": float(len(problems)), "probe/seconds": time.monotonic() - start}
