"""RLOO advantages: each response's baseline is the mean reward of the *other* responses.

REINFORCE Leave-One-Out (Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!";
Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
Human Feedback in LLMs", arXiv:2402.14740), over the K responses of one prompt:

    A_i = r_i - (1 / (K - 1)) sum_{j != i} r_j  =  K / (K - 1) * (r_i - mean(r))

The baseline does not depend on r_i, so the estimate stays unbiased; unlike GRPO there is no
division by the group std. Sky-T1-7B's last RL stage uses it with the verifier reward alone
(8 rollouts, no filtering). The pipeline around it (reward scale, overlong shaping, truncation
masks, zero-advantage rejection) is GRPO's: :func:`learner.advantages.compute_advantages` picks
this estimator with ``AdvantageConfig.estimator = "rloo"``.
"""

from __future__ import annotations

from torch import Tensor

from learner.masked import masked_count, masked_sum


def leave_one_out(rewards: Tensor, stats_mask: Tensor) -> tuple[Tensor, Tensor]:
    """A_i = r_i - mean_{j in S, j != i} r_j over the statistics set S of each group.

    K = |S| counts only the responses in S (ragged groups: pass ``present`` into S), so the
    baseline of a member averages its K - 1 others; a response outside S is compared with the
    mean of all of S (its advantage is normally zeroed by the caller's keep mask). Groups with
    |S| < 2 or all rewards in S equal are degenerate: their advantages are exactly 0.
    Shapes: rewards (G, N) float, stats_mask (G, N) bool -> (advantages (G, N), degenerate (G,)).
    """
    s = stats_mask.to(rewards.dtype)                                   # (G, N)
    n = masked_count(stats_mask, dim=1, keepdim=True)                  # (G, 1) K
    total = masked_sum(rewards, stats_mask, dim=1, keepdim=True)       # (G, 1)
    others = n - s                                                     # (G, N) members of S besides i
    baseline = (total - rewards * s) / others.clamp(min=1)
    adv = rewards - baseline                                           # (G, N)
    hi = rewards.masked_fill(~stats_mask, float("-inf")).amax(dim=1)
    lo = rewards.masked_fill(~stats_mask, float("inf")).amin(dim=1)
    degenerate = (n.squeeze(1) < 2) | (hi == lo)                       # (G,)
    return adv.masked_fill(degenerate.unsqueeze(1), 0.0), degenerate

