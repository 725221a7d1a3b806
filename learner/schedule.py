"""Mini-batch schedule of one learner step (DESIGN.md §4 batching).

A rollout batch of D_R groups is trained with N_reuse passes; each pass is a seeded shuffle
of the groups cut into D_R / D_T mini-batches of D_T groups, one optimizer update each:
N_SGD = (D_R / D_T) * N_reuse updates per learner step. Groups stay whole (a group's
responses are never split across updates). Strict on-policy is N_reuse = 1, D_T = D_R.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learner.config import BatchConfig


@dataclass(frozen=True)
class MiniBatchPlan:
    update_index: int               # 0 .. N_SGD - 1 within the learner step
    pass_index: int                 # 0 .. N_reuse - 1
    group_indices: tuple[int, ...]  # indices into the step's rollout batch of groups


def minibatch_schedule(
    num_groups: int, mini_batch: int, n_reuse: int, seed: int, shuffle: bool = True,
) -> list[MiniBatchPlan]:
    """The N_SGD updates of a step: pass p is permutation_p(range(D_R)) cut into D_T-sized runs.

    The permutations come from ``np.random.default_rng(seed)`` (one per pass, in order), so the
    same (seed, sizes) give the same plan on every rank and after a restart; derive ``seed``
    from the run seed and the learner step.
    """
    # the BatchConfig validators, for a plan built from sizes rather than a config
    n_per_pass = BatchConfig(rollout_batch=num_groups, mini_batch=mini_batch, n_reuse=n_reuse).updates_per_pass
    rng = np.random.default_rng(seed)
    plans: list[MiniBatchPlan] = []
    for p in range(n_reuse):
        order = rng.permutation(num_groups) if shuffle else np.arange(num_groups)
        for j in range(n_per_pass):
            idx = tuple(int(i) for i in order[j * mini_batch:(j + 1) * mini_batch])
            plans.append(MiniBatchPlan(len(plans), p, idx))
    return plans


def schedule_for(batch: BatchConfig, seed: int, num_groups: int | None = None) -> list[MiniBatchPlan]:
    """:func:`minibatch_schedule` from a BatchConfig (num_groups defaults to D_R)."""
    n = batch.rollout_batch if num_groups is None else num_groups
    return minibatch_schedule(n, batch.mini_batch, batch.n_reuse, seed, batch.shuffle)
