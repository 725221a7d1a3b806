"""PRIME: implicit process rewards, the PRM's loss, RLOO returns, online prompt filter (pure math).

Cui et al. 2025, "Process Reinforcement through Implicit Rewards", arXiv:2502.01456. An implicit
PRM pi_phi (initialised from the SFT policy) and a frozen reference pi_ref (the same SFT weights)
give every response token a process reward

    r_phi(y_t) = beta * log(pi_phi(y_t | y_<t) / pi_ref(y_t | y_<t))            (beta = 0.05)

and the PRM is trained online, on each rollout batch before the policy update, with the binary
cross-entropy between the outcome label r_o in {0, 1} and sigma(sum_t r_phi(y_t)).

Per rollout batch the learner wires: :func:`prompt_filter` on the group accuracies -> PRM and
reference log-probs (temperature 1) -> :func:`prm_loss` and a PRM optimizer step -> process
rewards :func:`implicit_process_rewards` (from the updated or the pre-update PRM,
``PrimeConfig.rewards_from``) -> :func:`prime_advantages` -> the PPO clip loss (``learner.loss``
takes the (B, L) advantages as they are). Tensors are (B, L) rows, right-padded, with a bool
mask; ``group_index`` (B,) says which prompt each row answers (groups may be ragged).

What the reference implementation does, and where it differs from DESIGN.md §12's formula

    A_t^i = sum_{s>=t} [r_phi(y_s^i) - 1/(K-1) sum_{j!=i} r_phi(y^j)/|y^j|] + r_o(y^i) - 1/(K-1) sum_{j!=i} r_o(y^j)

(read: PRIME-RL/PRIME ``training/verl/trainer/ppo/core_algos.py`` compute_rloo_returns,
compute_ce_dpo_loss_rm, compute_dpo_accuracy; ``training/verl/workers/actor/dp_prime.py``
compute_implicit_reward, update_policy; ``training/verl/trainer/ppo/ray_trainer.py`` filter; and
the PRIME team's verl port ``recipe/prime/prime_core_algos.py`` compute_rloo_advantage_return,
compute_dpo_abs_accuracy, ``recipe/prime/prime_dp_rm.py``, ``recipe/prime/config/prime_trainer.yaml``).
We implement the reference:

1. Process rewards are first normalised over the batch ("batch_norm"): divided by
   max_{i,t} |sum_{s>=t} r_phi(y_s^i)| + 1e-6 (the reference does it per data-parallel shard of
   the batch; here per call, so pass the whole rollout batch).
2. Leave-one-out per token (reference ``masked_rloo``), with mean_j = sum_s r_s^j / |y^j|:
       r'_s^i = K/(K-1) r_s^i - 1/(K-1) sum_{j in group} mean_j
              = [r_s^i - 1/(K-1) sum_{j!=i} mean_j] + (r_s^i - mean_i) / (K-1).
   The first bracket is the formula's term; the extra term sums to 0 over the tokens of y^i, so
   the return at t = 0 (the whole response) is the formula's, and the return at a later t differs
   by sum_{s>=t} (r_s^i - mean_i) / (K-1). The outcome reward sits on the last token only, where
   both read r_o^i - 1/(K-1) sum_{j!=i} r_o^j exactly.
3. The two sources are weighted (process_coef, outcome_coef: 5 and 5 in the verl recipe), summed,
   turned into returns R_t = sum_{s>=t} (gamma = 1), and the advantages are the returns whitened
   over every valid token of the batch: (R - mean) / sqrt(var_Bessel + 1e-8).
4. Not copied: the verl port's token granularity drops the last token's process reward
   (``token_level_score[i, :max_positions[i] - 1]``); the PRIME repository and the paper keep it,
   and so do we. The PRIME repository feeds the raw log-ratio (no beta) into the returns, the
   verl port beta times it; batch_norm and whitening cancel a common scale, so this only matters
   with process_reward_norm = "none", where we use beta as the paper does.
5. Ragged groups: the reference assumes every group has exactly K >= 2 contiguous rows; here K is
   the number of non-empty rows of the group. A group left with one row (the others masked:
   truncation masks, stale responses) has no leave-one-out baseline, so its row has no advantage
   at all: it is left out of the batch normalisation and the whitening statistics, gets advantage
   0 (``PrimeAdvantages.has_baseline`` False, counted in ``prime/no_baseline_rows``) and the
   learner drops it from the policy loss (not in T), as GRPO rejects a group with fewer than two
   responses. Whitening a return of 0 would otherwise hand it -mean/std: a signal with no baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from learner.config import PrimeConfig
from learner.masked import masked_count, masked_mean, masked_var

BATCH_NORM_EPS = 1e-6   # reference prime_norm: / (max |reverse cumsum| + 1e-6)
WHITEN_EPS = 1e-8       # reference masked_whiten: * rsqrt(var + 1e-8)
PRM_TEMPERATURE = 1.0   # the PRM and the reference score the sampled tokens at temperature 1


# ---------------------------------------------------------------- implicit PRM
def implicit_process_rewards(prm_logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, beta: float) -> Tensor:
    """r_phi(y_t) = beta (log pi_phi(y_t) - log pi_ref(y_t)) on valid tokens, 0 elsewhere.

    Differentiable in ``prm_logprobs``; the reference is detached (a frozen model never gets a
    gradient, even if its forward ran with grad on). (B, L), (B, L), (B, L) bool -> (B, L).
    """
    diff = prm_logprobs - ref_logprobs.detach()
    return torch.where(mask.bool(), beta * diff, torch.zeros_like(diff))


def prm_loss(
    prm_logprobs: Tensor,             # (B, L) log pi_phi(y_t), with grad
    ref_logprobs: Tensor,             # (B, L) log pi_ref(y_t) of the frozen reference
    mask: Tensor,                     # (B, L) bool response tokens
    labels: Tensor,                   # (B,) outcome label r_o in [0, 1] (verifier correctness)
    beta: float,
    num_responses: int | None = None,  # responses of the whole PRM mini-batch (all micro-batches, ranks)
    group_index: Tensor | None = None,  # (B,) prompt of each row: adds the pairwise accuracy metric
) -> tuple[Tensor, dict[str, float]]:
    """PRIME's cross-entropy loss: BCE(sigma(sum_t r_phi(y_t)), r_o), averaged over responses.

    The sum over this call's responses is divided by ``num_responses`` (default: B), so micro-
    batches of one mini-batch add up to the mini-batch mean whatever the split (the reference
    takes the mean per micro-batch / gradient-accumulation steps: the same for equal splits).
    Computed from logits (``binary_cross_entropy_with_logits``): the reference's
    BCE(sigmoid(x)) equals it wherever sigmoid does not saturate. Metrics: ``prm/loss`` (mean
    over this call), ``prm/accuracy`` = sign(implicit outcome reward) == sign(2 r_o - 1) (verl
    compute_dpo_abs_accuracy; 0 counts as wrong), ``prm/outcome_reward_mean``, and with
    ``group_index`` ``prm/pairwise_accuracy`` (:func:`prm_pairwise_accuracy`).
    """
    outcome = implicit_process_rewards(prm_logprobs, ref_logprobs, mask, beta).sum(dim=1)  # (B,)
    labels = labels.to(outcome.dtype)
    per_response = F.binary_cross_entropy_with_logits(outcome, labels, reduction="none")  # (B,)
    denominator = per_response.shape[0] if num_responses is None else num_responses
    loss = per_response.sum() / max(denominator, 1)
    with torch.no_grad():
        agree = torch.sign(outcome) == torch.sign(2 * labels - 1)
        metrics = {"prm/loss": float(per_response.mean()), "prm/accuracy": float(agree.float().mean()),
                   "prm/outcome_reward_mean": float(outcome.mean())}
        if group_index is not None:
            metrics["prm/pairwise_accuracy"] = prm_pairwise_accuracy(outcome, labels, group_index)
    return loss, metrics


def prm_pairwise_accuracy(outcome_rewards: Tensor, labels: Tensor, group_index: Tensor) -> float:
    """Within each group, how often the implicit outcome rewards order a pair as the labels do.

    Reference compute_dpo_accuracy (logged as ``dpo_acc``): over the pairs i < j of a group with
    dl = l_i - l_j and ds = s_i - s_j, sum((ds > 0) == (dl > 0)) |dl| / sum |dl| (so a tie ds = 0
    counts as agreeing when dl < 0, as in the reference); a group without differing labels
    scores 0.5; the mean over groups. (B,), (B,), (B,) -> float.
    """
    inv = _group_ids(group_index)
    same = inv[:, None] == inv[None, :]                                        # (B, B)
    pairs = same & torch.ones_like(same).triu(diagonal=1)
    dl = (labels[:, None] - labels[None, :]).to(torch.float64)
    ds = outcome_rewards[:, None] - outcome_rewards[None, :]
    weight = dl.abs() * pairs
    hits = ((ds > 0) == (dl > 0)).to(torch.float64) * weight
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    num = torch.zeros(n_groups, dtype=torch.float64, device=hits.device).index_add_(0, inv, hits.sum(dim=1))
    den = torch.zeros(n_groups, dtype=torch.float64, device=hits.device).index_add_(0, inv, weight.sum(dim=1))
    per_group = torch.where(den > 0, num / den.clamp(min=1e-30), torch.full_like(num, 0.5))
    return float(per_group.mean()) if n_groups else 0.0


# ---------------------------------------------------------------- returns and advantages
@dataclass
class PrimeAdvantages:
    advantages: Tensor   # (B, L) float32 token advantages for the PPO clip loss, 0 outside mask
    returns: Tensor      # (B, L) float32 R_t = sum_{s>=t} weighted RLOO rewards, 0 outside mask
    has_baseline: Tensor  # (B,) bool: the row's group has another row (else advantage 0, not trained)
    metrics: dict[str, float] = field(default_factory=dict)


def normalize_process_rewards(rewards: Tensor, mask: Tensor, how: str) -> tuple[Tensor, float]:
    """'batch_norm': r / (max_{i,t} |sum_{s>=t} r_s^i| + 1e-6) over the batch; 'none': r.

    Keeps the relative sizes of the rewards and bounds every process return by 1 (reference
    prime_norm). Returns (rewards (B, L), the divisor used).
    """
    rewards = torch.where(mask, rewards, torch.zeros_like(rewards))
    if how == "none":
        return rewards, 1.0
    if how != "batch_norm":
        raise ValueError(f"unknown process reward normalisation {how!r}")
    scale = float(reverse_cumsum(rewards).abs().max()) + BATCH_NORM_EPS if rewards.numel() else 1.0
    return rewards / scale, scale


def group_sizes(mask: Tensor, group_index: Tensor) -> Tensor:
    """K of each row's group: its rows with at least one valid token. (B, L) bool, (B,) -> (B,) int64."""
    member = mask.any(dim=1).to(torch.int64)                                   # (B,)
    inv = _group_ids(group_index)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    return torch.zeros(n_groups, dtype=torch.int64, device=mask.device).index_add(0, inv, member)[inv]


def group_leave_one_out(values: Tensor, mask: Tensor, group_index: Tensor) -> Tensor:
    """The reference's per-token RLOO: v'_s^i = (K v_s^i - sum_{j in group} mean_j) / (K - 1).

    mean_j is the mean of row j's valid values; K counts the rows of i's group that have a valid
    token. Rows of groups with K < 2 (no one to compare with) get 0, as do invalid positions.
    Exactly r_i - mean_{j != i} r_j when each row has a single valid value (the outcome reward).
    (B, L) float, (B, L) bool, (B,) int -> (B, L).
    """
    member = (masked_count(mask, dim=1) > 0).to(values.dtype)                  # (B,)
    mean = masked_mean(values, mask, dim=1)                                    # (B,)
    inv = _group_ids(group_index)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    zeros = torch.zeros(n_groups, dtype=values.dtype, device=values.device)
    k = zeros.index_add(0, inv, member)[inv]                                   # (B,) K of the row's group
    total = zeros.index_add(0, inv, mean * member)[inv]                        # (B,) sum_j mean_j
    out = (k[:, None] * values - total[:, None]) / (k[:, None] - 1).clamp(min=1)
    valid = mask & (k >= 2)[:, None]
    return torch.where(valid, out, torch.zeros_like(out))


def prime_advantages(
    process_rewards: Tensor,   # (B, L) r_phi(y_t) = beta log(pi_phi / pi_ref), any grad is dropped
    mask: Tensor,              # (B, L) bool response tokens
    outcome_rewards: Tensor,   # (B,) verifier reward r_o (1 correct, 0 wrong)
    group_index: Tensor,       # (B,) int: rows with the same value answer the same prompt
    cfg: PrimeConfig,
) -> PrimeAdvantages:
    """Token advantages of one rollout batch: normalise -> RLOO per source -> returns -> whiten.

    Call once per rollout batch (the whitening and batch_norm statistics are the batch's), never
    per mini-batch. See the module docstring for the exact definition and its sources.
    """
    all_valid = mask.bool()
    has_baseline = group_sizes(all_valid, group_index) >= 2                     # (B,)
    mask = all_valid & has_baseline[:, None]       # rows without a baseline take no part (docstring, 5.)
    raw = process_rewards.detach().to(torch.float32)
    normed, scale = normalize_process_rewards(raw, mask, cfg.process_reward_norm)
    last = last_token_mask(mask)
    outcome = torch.where(last, outcome_rewards.detach().to(torch.float32)[:, None], torch.zeros_like(normed))
    token_rewards = (cfg.process_coef * group_leave_one_out(normed, mask, group_index)
                     + cfg.outcome_coef * group_leave_one_out(outcome, last, group_index))  # (B, L)
    returns = torch.where(mask, reverse_cumsum(token_rewards), torch.zeros_like(token_rewards))
    advantages = masked_whiten(returns, mask) if cfg.whiten_advantages else returns
    n = mask.sum().clamp(min=1)
    valid = raw[all_valid]                         # the PRM's rewards of every row, trained or not
    metrics = {
        "process_reward/mean": float(valid.mean()) if valid.numel() else 0.0,
        "process_reward/std": float(valid.std()) if valid.numel() > 1 else 0.0,
        "process_reward/sum_mean": float(raw.sum(dim=1).mean()) if raw.numel() else 0.0,
        "process_reward/norm_scale": scale,
        "return/mean": float(returns.sum() / n),
        "advantage/abs_mean": float(advantages.abs().sum() / n),
        "prime/no_baseline_rows": float((~has_baseline & all_valid.any(dim=1)).sum()),
    }
    return PrimeAdvantages(advantages, returns, has_baseline, metrics)


def reverse_cumsum(x: Tensor) -> Tensor:
    """R_t = sum_{s>=t} x_s along the last dim (undiscounted return, gamma = 1)."""
    return x.flip(-1).cumsum(-1).flip(-1)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = WHITEN_EPS) -> Tensor:
    """(v - mean) / sqrt(var + eps) over the valid entries (Bessel variance), 0 elsewhere."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    return torch.where(mask, (values - mean) * torch.rsqrt(var + eps), torch.zeros_like(values))


def last_token_mask(mask: Tensor) -> Tensor:
    """True at the last valid position of each row (none for an empty row). (B, L) -> (B, L)."""
    pos = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    last = torch.where(mask, pos, torch.full_like(pos, -1)).amax(dim=-1, keepdim=True)   # (B, 1)
    return (pos == last) & mask


# ---------------------------------------------------------------- online prompt filter
CORRECT_AT = 1.0 - 1e-9   # a reward of 1 (up to float noise) is a correct answer, as in learner.step_metrics


def outcome_labels(rewards: Tensor) -> Tensor:
    """The outcome label r_o in {0, 1} of each verifier reward (1 = correct); any shape, float32."""
    return (rewards >= CORRECT_AT).to(torch.float32)


def group_accuracy(correct: Tensor, present: Tensor | None = None) -> Tensor:
    """Fraction of a group's (present) responses that are correct, in float64 so that band ends
    such as 0.2 = 1/5 compare exactly. (G, N) -> (G,); a group with no response has accuracy 0."""
    correct = correct.to(torch.float64)
    present = torch.ones_like(correct, dtype=torch.bool) if present is None else present.bool()
    return masked_mean(correct, present, dim=1)


def prompt_filter(accuracy: Tensor, low: float, high: float) -> Tensor:
    """Keep a prompt iff low <= accuracy <= high (PRIME's band [0.2, 0.8], both ends inclusive;
    with K = 4 rollouts it drops exactly the all-wrong and all-correct prompts). (G,) -> (G,) bool."""
    return (accuracy >= low) & (accuracy <= high)


def prompt_filter_metrics(keep: Tensor) -> dict[str, float]:
    n = keep.numel()
    return {"prompts/filtered_frac": float((~keep).sum()) / n if n else 0.0, "prompts/kept": float(keep.sum())}


# ---------------------------------------------------------------- row <-> (B, L) helpers for wiring
def pad_rows(rows: Sequence[np.ndarray | Tensor], dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """Per-response 1-D arrays (e.g. Row.old_logprobs) -> right-padded (B, L) values and bool mask."""
    length = max((len(r) for r in rows), default=0)
    values = torch.zeros(len(rows), length, dtype=dtype)
    mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for i, r in enumerate(rows):
        values[i, :len(r)] = torch.as_tensor(np.asarray(r), dtype=dtype)
        mask[i, :len(r)] = True
    return values, mask


def unpad_rows(values: Tensor, mask: Tensor) -> list[np.ndarray]:
    """Inverse of :func:`pad_rows`: the valid prefix of each row as a float32 numpy array."""
    return [values[i, :int(mask[i].sum())].detach().to(torch.float32).cpu().numpy() for i in range(values.shape[0])]


def _group_ids(group_index: Tensor) -> Tensor:
    """Arbitrary group labels -> 0 .. G-1 (B,) int64."""
    return torch.unique(group_index, return_inverse=True)[1].reshape(-1)
