"""PRIME's pass over one rollout batch, between admission and the policy updates (DESIGN.md §12).

Cui et al. 2025, "Process Reinforcement through Implicit Rewards" (arXiv:2502.01456); the math is
``learner.prime``, the PRM's engine ``learner.prm_engine``. For the rows of a learner step (the
admitted groups' responses, already through the prompt filter at admission):

1. the frozen reference (the run's initial weights) scores every row at temperature 1, without
   gradients (``RankEngine.score_rows(which="reference")``);
2. the PRM takes one optimizer update on the whole batch with PRIME's cross-entropy loss,
   data-parallel over the learner's ranks; the forward of that update scores the rows *before*
   the PRM has seen them: ``prm/accuracy`` and ``prm/pairwise_accuracy`` are held-out figures
   (the reference implementation logs the same);
3. process rewards r_t = beta log(pi_prm / pi_ref) from the updated PRM (a second forward) or
   from the pre-update one (``PrimeConfig.rewards_from``);
4. token advantages: process and outcome rewards with RLOO baselines -> returns -> whitened over
   the batch (``learner.prime.prime_advantages``); they go to ``Row.token_advantages`` and the
   PPO clip loss reads them per token. A row whose group has no other row (no baseline) has no
   advantage: it is left out of the policy update (the PRM still learned from it).

:func:`prime_token_advantages` is the pure part (no Ray), :class:`PrimeStep` the calls on the ranks.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import ray
import torch

from learner.batching import Row, plan_update
from learner.config import PrimeConfig
from learner.prime import (
    PRM_TEMPERATURE,
    implicit_process_rewards,
    outcome_labels,
    pad_rows,
    prime_advantages,
    prm_loss,
    unpad_rows,
)
from learner.trainer_config import LearnerConfig


def prime_token_advantages(rows: Sequence[Row], ref: Sequence[np.ndarray], prm_before: Sequence[np.ndarray],
                           prm_after: Sequence[np.ndarray],
                           cfg: PrimeConfig) -> tuple[list[np.ndarray], list[bool], dict]:
    """Token advantages of a rollout batch, whether each row has a baseline (a row without one has
    advantage 0 and must not be trained), and the step's PRIME metrics.

    ``ref``, ``prm_before``, ``prm_after``: per row, the (R,) log-probs of the reference, of the
    PRM before its update on this batch (held-out), and of the PRM whose process rewards are used.
    """
    ref_t, mask = pad_rows(ref)                                                    # (B, L) x2
    before_t, _ = pad_rows(prm_before)
    after_t, _ = pad_rows(prm_after)
    labels = outcome_labels(torch.tensor([r.reward for r in rows], dtype=torch.float64))    # (B,)
    group = torch.tensor([r.group_index for r in rows], dtype=torch.long)                   # (B,)
    _, held_out = prm_loss(before_t, ref_t, mask, labels, cfg.beta, group_index=group)
    process = implicit_process_rewards(after_t, ref_t, mask, cfg.beta)                       # (B, L)
    result = prime_advantages(process, mask, labels, group, cfg)
    return unpad_rows(result.advantages, mask), result.has_baseline.tolist(), {**held_out, **result.metrics}


class PrimeStep:
    """The ranks' side of a PRIME pass (module docstring); the ranks must have a PRM (``setup_prm``)."""

    def __init__(self, cfg: LearnerConfig, ranks):
        if cfg.prime is None:
            raise ValueError("PrimeStep needs cfg.prime")
        self.cfg, self.ranks = cfg, ranks

    def _per_rank(self, rows: Sequence[Row]) -> list[list[list[int]]]:
        """Every row of the batch, split into token-budget micro-batches dealt to the ranks."""
        return plan_update(rows, list(range(len(rows))), self.cfg.micro_batch_tokens, self.ranks.world)

    def _gather(self, results: list[dict[int, np.ndarray]], n: int) -> list[np.ndarray]:
        merged: dict[int, np.ndarray] = {}
        for part in results:
            merged |= part
        return [np.array(merged[i]) for i in range(n)]     # writable copies of Ray's read-only views

    def run(self, rows: list[Row]) -> tuple[list[Row], dict[str, float]]:
        """Reference scores, one PRM update, process rewards -> ``rows[i].token_advantages``; returns
        the rows the policy trains on (those with a baseline) and the metrics."""
        cfg, prime, world = self.cfg, self.cfg.prime, self.ranks.world
        if not rows:
            return rows, {}
        chunk = cfg.loss.logprob_chunk_size
        rows_ref, per_rank = ray.put(rows), self._per_rank(rows)
        ref = self._gather(self.ranks.call_each("score_rows", [
            (rows_ref, per_rank[r], cfg.loss, PRM_TEMPERATURE, "reference") for r in range(world)]), len(rows))
        ref_ref = ray.put(dict(enumerate(ref)))
        updates = self.ranks.call_each("prm_update", [
            (rows_ref, per_rank[r], ref_ref, len(rows), prime.beta, chunk) for r in range(world)])
        before = self._gather([u[0] for u in updates], len(rows))
        after = before
        if prime.rewards_from == "updated_prm":
            after = self._gather(self.ranks.call_each("prm_score", [
                (rows_ref, per_rank[r], chunk) for r in range(world)]), len(rows))
        advantages, has_baseline, metrics = prime_token_advantages(rows, ref, before, after, prime)
        for row, adv in zip(rows, advantages):
            row.token_advantages = adv.astype(np.float32)
        return [r for r, ok in zip(rows, has_baseline) if ok], {**metrics, **updates[0][1]}
