"""One learner step's plan (step 2 of ``learner.loop``): what the ranks need for the step's N_SGD updates.

From the admitted groups (``learner.admission.Collected``): the rows of the responses in the loss,
optional pi_old recompute / reference log-probs (no grad, split over the ranks), with PRIME the PRM's
update and the token advantages from its process rewards (``learner.prime_step``), the mini-batch
schedule (``learner.schedule``) with each update's lags checked against the one lag the step's mode
allows (strict on-policy 0, fixed lag k), each update's micro-batches dealt to the ranks
(``learner.batching``), and the step's entropy coefficient.

Update u of the step runs at version v0 + u, so reuse adds lag 0..N_SGD-1 on top of the actors' lag
(``lag/*``, the update lag; ``lag_start/*`` is the generation lag at v0). A mini-batch without any loss
token (every response masked) is not an update: no optimizer step on a zero gradient, no version (the
version counts optimizer steps, so lags stay honest); it is counted in ``skipped``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import ray
import torch

from learner.admission import Collected
from learner.batching import Row, assign_to_ranks, plan_update, rows_from_groups, split_micro_batches
from learner.errors import PolicyLagError
from learner.lag import LagReport, lag_report
from learner.modes import StepMode
from learner.prime_step import PrimeStep
from learner.schedule import schedule_for
from learner.trainer_config import LearnerConfig


@dataclass
class StepPlan:
    """Everything the ranks need for the step's N_SGD updates."""

    rows: list[Row]
    v0: int                                     # version at the start of the step
    rank_plans: list[list[list[list[int]]]] = field(default_factory=list)  # [update][rank][micro-batch] -> rows
    required_lags: list[int | None] = field(default_factory=list)  # per update: the one lag allowed (or None)
    lags: LagReport = field(default_factory=LagReport)      # update lags, over the step's updates
    start_lags: LagReport = field(default_factory=LagReport)  # generation lags at v0, each row once
    skipped: int = 0                            # mini-batches without a loss token: not updates
    alpha: float = 0.0                          # entropy coefficient for this step
    metrics: dict = field(default_factory=dict)  # the plan's own metrics (PRIME's PRM and rewards)


@dataclass
class StepPlanner:
    """Plans the steps of one learner: its config, its ranks and the run's temperature and seed."""

    cfg: LearnerConfig
    ranks: object                               # learner.rank_actor.RankGroup (or a test double)
    temperature: float
    seed: int

    def plan(self, col: Collected, *, mode: StepMode, step: int, v0: int, controller) -> StepPlan:
        """The plan of learner step ``step`` at version ``v0`` in ``mode``; ``controller`` (the entropy
        controller) gives the step's coefficient."""
        cfg = self.cfg
        rows = rows_from_groups([g for _, g in col.entries], col.advantages, col.loss_masks)
        if cfg.old_logprobs == "recompute":
            self.score(rows, "policy", "old_logprobs")
        if cfg.needs_reference:
            self.score(rows, "reference", "ref_logprobs")
        prime_metrics = {}
        if cfg.prime is not None:                   # rows without a leave-one-out baseline leave the step
            rows, prime_metrics = PrimeStep(cfg, self.ranks).run(rows)
        by_group: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            by_group[r.group_index].append(i)
        schedule = schedule_for(mode.batch, seed=self.seed * 1_000_003 + step, num_groups=len(col.entries))
        plan = StepPlan(rows=rows, v0=v0, metrics=prime_metrics)

        def lags_at(version: int, idx: list[int]) -> LagReport:
            return lag_report(version, torch.tensor([rows[i].version_start for i in idx], dtype=torch.long),
                              torch.tensor([rows[i].loss_tokens for i in idx], dtype=torch.long),
                              torch.tensor([rows[i].version_end for i in idx], dtype=torch.long))

        plan.start_lags = lags_at(plan.v0, list(range(len(rows))))
        for p in schedule:
            idx = [i for gi in p.group_indices for i in by_group[gi]]
            if not idx:                             # no loss token: no update (module docstring)
                plan.skipped += 1
                continue
            version = plan.v0 + len(plan.rank_plans)  # the applied updates so far
            report, required = lags_at(version, idx), mode.required_lag(version)
            check_update_lags(report, version, required, mode)
            plan.lags = plan.lags.merge(report)
            plan.rank_plans.append(plan_update(rows, idx, cfg.micro_batch_tokens, self.ranks.world, cfg.packs_on(self.ranks.device)))
            plan.required_lags.append(required)
        current = None
        if cfg.entropy.type == "adaptive" and cfg.entropy.indicator == "current_batch":
            if not rows:
                return plan                         # nothing to train, no batch entropy: alpha 0
            current = float(-np.concatenate([r.old_logprobs for r in rows]).mean())
        plan.alpha = controller.coef(current)
        return plan

    def score(self, rows: list[Row], which: str, attr: str) -> None:
        """Fill ``rows[i].<attr>`` with log-probs of the current policy / reference (no grad)."""
        for i, values in self.per_token(rows, which, "logp", self.temperature).items():
            setattr(rows[i], attr, values)

    def per_token(self, rows: list[Row], which: str, what: str, temperature: float) -> dict[int, np.ndarray]:
        """Row index -> a value per response token (``what``: "logp" or "entropy" of softmax(logits /
        ``temperature``)) under the current policy or the reference, spread over the ranks (no grad)."""
        lengths = [r.input_len for r in rows]
        packed = self.cfg.packs_on(self.ranks.device)
        per_rank = assign_to_ranks(split_micro_batches(lengths, self.cfg.micro_batch_tokens, packed), lengths,
                                   self.ranks.world, packed)
        ref, out = ray.put(rows), {}
        for scored in self.ranks.call_each("score_rows", [(ref, per_rank[r], self.cfg.loss, temperature, which, what)
                                                          for r in range(self.ranks.world)]):
            out |= scored
        return out


def check_update_lags(report: LagReport, version: int, required: int | None, mode: StepMode) -> None:
    """Raise PolicyLagError when an update would train a lag other than the one ``mode`` allows."""
    if required is not None and report.sample_hist and set(report.sample_hist) != {required}:
        what = "strict on-policy" if mode.strict else f"fixed lag {mode.fixed_lag}"
        raise PolicyLagError(f"{what}: the update at version {version} would train lags {report.sample_hist} "
                             f"(every token must have lag {required})")
