"""Outcome-reward advantages over groups of responses: GRPO or RLOO (DESIGN.md §4, §12).

Pipeline (:func:`compute_advantages`), per rollout batch, outside the optimizer loop:

1. reward scale: r = raw (``binary``) or 2 raw - 1 (``signed``);
2. DAPO soft overlong punishment added to r (if ``overlong_cache`` is set);
3. truncation mask chooses which responses enter the group statistics and which keep their
   advantage / stay in the loss (``none`` / ``before`` / ``after``; ``overlong_filter``);
4. the estimator over the statistics set (``AdvantageConfig.estimator``): GRPO
   A_i = (r_i - mean(r)) / (std(r) + eps), std unbiased (Bessel); or RLOO
   A_i = r_i - mean of the other responses' r (``learner.rloo``);
5. groups whose kept responses all have A = 0 are zero-advantage groups, rejected if configured.

Tensors are (G, N): G groups of N responses (pad ragged groups and pass ``present``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from learner.config import AdvantageConfig
from learner.masked import masked_count, masked_mean, masked_var
from learner.rloo import leave_one_out


@dataclass
class AdvantageResult:
    advantages: Tensor   # (G, N) float32 per-response advantage, 0 where masked
    loss_mask: Tensor    # (G, N) bool: the response's tokens enter the loss and the token count T
    keep_groups: Tensor  # (G,) bool: False for rejected zero-advantage groups (loss_mask cleared)
    zero_groups: Tensor  # (G,) bool: no kept response has a non-zero advantage
    rewards: Tensor      # (G, N) float32 shaped rewards (scale + overlong penalty)
    # what the metrics are read from: (G, N) unshaped rewards, overlong penalty, present, truncated,
    # and the loss mask before zero-advantage rejection
    _parts: tuple[Tensor, ...] = field(repr=False, default=())

    @functools.cached_property
    def metrics(self) -> dict[str, float]:
        """Computed when first asked: the learner admits groups one at a time and reads none of these
        (~40% of a 16-response group's cost)."""
        base, penalty, present, truncated, before_rejection = self._parts
        return {
            "advantage/groups": float(truncated.shape[0]),
            "advantage/zero_groups": float(self.zero_groups.sum()),
            "advantage/rejected_groups": float((~self.keep_groups).sum()),
            "advantage/masked_responses": float((present & ~before_rejection).sum()),
            "advantage/abs_mean": float(masked_mean(self.advantages.abs(), self.loss_mask)),
            "reward/mean": float(masked_mean(base, present)),
            "reward/shaped_mean": float(masked_mean(self.rewards, present)),
            "reward/overlong_penalty_mean": float(masked_mean(penalty, present)),
            "response/truncated_frac": float(masked_mean(truncated, present)),
        }

    @property
    def num_rejected(self) -> int:
        return int((~self.keep_groups).sum())


def scale_rewards(raw: Tensor, scale: str) -> Tensor:
    """r = raw for ``binary`` (0/1); r = 2 raw - 1 for ``signed`` (±1)."""
    raw = raw.to(torch.float32)
    if scale == "binary":
        return raw
    if scale == "signed":
        return 2.0 * raw - 1.0
    raise ValueError(f"unknown reward scale {scale!r}")


def overlong_penalty(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO soft overlong punishment R(|y|) (DAPO, "Overlong Reward Shaping").

    R = 0                                   if |y| <= L_max - L_cache
    R = ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
    R = -1                                  if |y| > L_max
    i.e. clamp((L_max - L_cache - |y|) / L_cache, -1, 0).
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < L_cache <= L_max, got L_cache={cache_len}, L_max={max_len}")
    excess = (max_len - cache_len) - lengths.to(torch.float32)
    return (excess / cache_len).clamp(min=-1.0, max=0.0)


def group_normalize(rewards: Tensor, stats_mask: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """A_i = (r_i - mean_S(r)) / (std_S(r) + eps) over the statistics set S of each group.

    std_S is unbiased: sqrt(sum_S (r - mean)^2 / (|S| - 1)). Groups with |S| < 2 or all rewards
    in S equal are degenerate: their advantages are exactly 0 (not eps-noise). Advantages are
    computed for every response (also those outside S); callers zero the masked ones.
    Returns (advantages (G, N), degenerate (G,)).
    """
    mean = masked_mean(rewards, stats_mask, dim=1, keepdim=True)       # (G, 1)
    var = masked_var(rewards, stats_mask, dim=1, keepdim=True)         # (G, 1)
    adv = (rewards - mean) / (var.sqrt() + eps)                        # (G, N)
    hi = rewards.masked_fill(~stats_mask, float("-inf")).amax(dim=1)
    lo = rewards.masked_fill(~stats_mask, float("inf")).amin(dim=1)
    degenerate = (masked_count(stats_mask, dim=1) < 2) | (hi == lo)    # (G,)
    return adv.masked_fill(degenerate.unsqueeze(1), 0.0), degenerate


# One function per truncation mask: truncated (G, N) -> (stats_mask, keep_mask), where
# stats_mask selects the responses entering mean/std and keep_mask those that keep their
# advantage and stay in the loss.
def _mask_none(truncated: Tensor) -> tuple[Tensor, Tensor]:
    ones = torch.ones_like(truncated)
    return ones, ones


def _mask_before(truncated: Tensor) -> tuple[Tensor, Tensor]:
    return ~truncated, ~truncated


def _mask_after(truncated: Tensor) -> tuple[Tensor, Tensor]:
    return torch.ones_like(truncated), ~truncated


TRUNCATION_MASKS: dict[str, Callable[[Tensor], tuple[Tensor, Tensor]]] = {
    "none": _mask_none, "before": _mask_before, "after": _mask_after,
}

# One function per estimator: (rewards, stats_mask, cfg) -> (advantages, degenerate); both are
# exactly 0 on degenerate groups (|S| < 2 or equal rewards), which makes them zero-advantage groups.
ESTIMATORS: dict[str, Callable[[Tensor, Tensor, AdvantageConfig], tuple[Tensor, Tensor]]] = {
    "grpo": lambda rewards, stats, cfg: group_normalize(rewards, stats, cfg.std_eps),
    "rloo": lambda rewards, stats, cfg: leave_one_out(rewards, stats),
}


def compute_advantages(
    raw_rewards: Tensor,            # (G, N) correctness reward in [0, 1]
    lengths: Tensor,                # (G, N) response lengths |y| in tokens
    truncated: Tensor,              # (G, N) bool, finish_reason == "length"
    cfg: AdvantageConfig,
    max_len: int | None = None,     # L_max of the current stage (needed for overlong shaping)
    present: Tensor | None = None,  # (G, N) bool, False for padding slots of ragged groups
) -> AdvantageResult:
    """Shaped rewards -> masked group advantages -> zero-advantage rejection.

    r = scale(raw) + R_overlong(|y|);  (S, K) = truncation_mask(truncated);  K &= ~truncated if
    overlong_filter;  A = estimator(r, S & present) * K;  loss_mask = K & present;
    zero group  <=>  no response with loss_mask and A != 0.  With ``reject_zero_advantage`` a
    zero group is rejected: ``keep_groups`` is False and its loss_mask is cleared, so its tokens
    never count in T even if the caller keeps it in the schedule (without rejection, zero groups
    stay in the loss with A = 0 and dilute T: the no-rejection ablation).
    """
    truncated = truncated.bool()
    present = torch.ones_like(truncated) if present is None else present.bool()
    base = scale_rewards(raw_rewards, cfg.reward_scale)                # (G, N)
    penalty = torch.zeros_like(base)
    if cfg.overlong_cache is not None:
        if max_len is None:
            raise ValueError("overlong_cache is set: pass max_len (L_max of the current stage)")
        penalty = overlong_penalty(lengths, max_len, cfg.overlong_cache)
    rewards = base + penalty

    stats_mask, keep_mask = TRUNCATION_MASKS[cfg.truncation_mask](truncated)
    if cfg.overlong_filter:
        keep_mask = keep_mask & ~truncated
    loss_mask = keep_mask & present
    adv, _ = ESTIMATORS[cfg.estimator](rewards, stats_mask & present, cfg)
    adv = adv.masked_fill(~loss_mask, 0.0)
    zero_groups = ~((adv != 0) & loss_mask).any(dim=1)                 # (G,)
    keep_groups = ~zero_groups if cfg.reject_zero_advantage else torch.ones_like(zero_groups)
    before_rejection = loss_mask
    loss_mask = loss_mask & keep_groups.unsqueeze(1)
    # the metrics are computed later, if ever: copies of what may be the caller's own tensors (bool and
    # float32 inputs pass through unconverted), which it may change meanwhile
    return AdvantageResult(adv, loss_mask, keep_groups, zero_groups, rewards,
                           (base.clone(), penalty, present.clone(), truncated.clone(), before_rejection))


def broadcast_to_tokens(advantages: Tensor, token_mask: Tensor) -> Tensor:
    """A_it = A_i on every valid token of response i, 0 elsewhere: (B,), (B, L) -> (B, L)."""
    return advantages.to(torch.float32).unsqueeze(-1) * token_mask.to(torch.float32)
