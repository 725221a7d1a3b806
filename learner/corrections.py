"""Behaviour-policy corrections of the policy-gradient term (issue 22; DESIGN.md §12).

Three log-probs of each sampled token y_t meet in the loss:

    mu        the behaviour policy: the actor (vLLM) that sampled y_t      PolicyLossInputs.behaviour_logprobs
    pi_old    the learner's own log-prob with the weights at the start of  PolicyLossInputs.old_logprobs
              the step (``old_logprobs='recompute'``), a.k.a. pi_prox       (no grad)
    pi_theta  the learner now                                              PolicyLossInputs.logprobs (grad)

The PPO clip acts on r = pi_theta / pi_old (``learner.loss``). A correction multiplies each
token's clipped objective by a weight w_t, a function of the behaviour ratio k_t = pi_old / mu
that is never differentiated (it holds no pi_theta):

    L_pg = -(1/T) sum_t w_t * obj_t,   obj_t = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)  (+ dual clip)

=========  ==================  ====================================  ==========================================
type       config              w_t                                   source
=========  ==================  ====================================  ==========================================
none       NoCorrection        1 (the loss is bit-for-bit unchanged)
tis        TruncatedIS(C)      min(k_t, C)                           Yao et al. 2025 (fengyao.notion.site/
                                                                     off-policy-rl); verl rollout IS, C = 2.0
mask       MaskedIS(lo, up)    k_t * 1{lo <= k_t <= up}              IcePop (Ling Team 2025, Ring-1T report:
                               (1{...} with weight_kept=False)       M(k) = k in [alpha, beta], else 0);
                                                                     OpenRLHF 'icepop'; prime-rl token masks
decoupled  DecoupledPPO(cap)   k_t * 1{k_t <= cap}  (k_t if None)    Hilton et al. 2021 (arXiv:2110.00641);
                                                                     AReaL, Fu et al. 2025 (arXiv:2505.24298)
=========  ==================  ====================================  ==========================================

Dropped tokens (weight 0 by a mask rule) leave the numerator but **stay in T**, as in all three
references: OpenRLHF's icepop zeroes the coefficient and keeps ``action_mask``; prime-rl's
``loss_scale`` counts the whole ``loss_mask``; AReaL keeps the pre-rejection count ("otherwise mask
mode would inflate per-token gradients by N_original / N_kept"). Dropping therefore shrinks the
step instead of re-weighting the survivors, and T needs no second all-reduce. Only the pg term is
weighted: an entropy bonus or a k3 KL penalty still acts on every loss token (IcePop's objective
also leaves its KL term unmasked).

TIS and decoupled PPO share one formula with different caps; the difference is their purpose.
TIS (Yao et al.) corrects the numerical mismatch between vLLM and the learner at the same
weights, so k stays near 1 and a truncation at C = 2 keeps every token. Decoupled PPO corrects
staleness (lag > 0) of asynchronous samples; AReaL drops (not truncates) tokens above its cap,
and only an upper cap (a stale token the policy has since made *less* likely, k < 1, is just
down-weighted). Every variant needs pi_old to be the learner's recomputed log-prob: with
``old_logprobs='behaviour'``, pi_old = mu and every weight is 1, which the config refuses.

Metrics (``learner.loss`` convention: sums over loss tokens divided by T; ``/max`` and ``/min``
keys reduce with max / min):

    correction/weight/mean      mean applied weight w (dropped tokens count 0)
    correction/ratio/mean, /max, /min   behaviour ratio k = pi_old / mu
    correction/capped_frac      tokens whose weight was truncated (tis: k > C)
    correction/masked_frac      tokens dropped by the rule (w = 0)
    mismatch/behaviour_kl_k3    mean(k - 1 - log k): KL(mu || pi_old) >= 0, the off-policy gap the
                                weights correct (the lag guard's mismatch signal when present)
    mismatch/behaviour_kl_k1    mean(log mu - log pi_old): signed, noisier estimate of the same KL
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from learner.config import CorrectionConfig, DecoupledPPO, MaskedIS, TruncatedIS
from learner.masked import masked_mean

_MAX_LOG_RATIO = 20.0  # same guard as learner.loss: exp(20) ~ 5e8, never inf


@dataclass
class CorrectionWeights:
    """Per-token result of one correction rule; every tensor (B, L), no grad, 0/False off the mask."""

    weight: Tensor   # w_t multiplying the token's clipped objective
    capped: Tensor   # bool: weight truncated to the cap (tis)
    masked: Tensor   # bool: token dropped from the pg numerator (w_t = 0 by the rule)


def behaviour_log_ratio(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """log k = log pi_old - log mu on loss tokens (float64, clamped to +-20), 0 off the mask.

    Padding may hold garbage (NaN/inf) log-probs: it is replaced before the subtraction.
    """
    mask = mask.bool()
    old = torch.where(mask, old_logprobs.detach().to(torch.float64), 0.0)
    mu = torch.where(mask, behaviour_logprobs.detach().to(torch.float64), 0.0)
    return (old - mu).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def tis_weights(log_k: Tensor, mask: Tensor, cfg: TruncatedIS) -> CorrectionWeights:
    """w = min(k, C): tokens the learner finds more likely than vLLM did count at most C times."""
    k = log_k.exp()
    capped = (k > cfg.cap) & mask
    weight = torch.where(mask, k.clamp(max=cfg.cap), 0.0)
    return CorrectionWeights(weight, capped, torch.zeros_like(capped))


def mask_weights(log_k: Tensor, mask: Tensor, cfg: MaskedIS) -> CorrectionWeights:
    """w = k (or 1) inside [lower, upper] (edges included), 0 outside: IcePop's M(k)."""
    k = log_k.exp()
    keep = (k >= cfg.lower) & (k <= cfg.upper) & mask
    weight = torch.where(keep, k if cfg.weight_kept else torch.ones_like(k), 0.0)
    return CorrectionWeights(weight, torch.zeros_like(keep), mask & ~keep)


def decoupled_weights(log_k: Tensor, mask: Tensor, cfg: DecoupledPPO) -> CorrectionWeights:
    """w = pi_prox / mu, dropped (0) above the cap (AReaL token mask); uncapped when cap is None."""
    k = log_k.exp()
    drop = (k > cfg.cap) & mask if cfg.cap is not None else torch.zeros_like(mask)
    weight = torch.where(mask & ~drop, k, 0.0)
    return CorrectionWeights(weight, torch.zeros_like(drop), drop)


_RULES = {"tis": tis_weights, "mask": mask_weights, "decoupled": decoupled_weights}


def correction_weights(log_k: Tensor, mask: Tensor, cfg: CorrectionConfig) -> CorrectionWeights:
    """Dispatch on ``cfg.type`` (not 'none': the loss skips the multiplication entirely then).

    ``log_k`` (B, L) from :func:`behaviour_log_ratio`; ``mask`` (B, L) bool loss mask.
    """
    if cfg.type not in _RULES:
        raise ValueError(f"no weights for correction type {cfg.type!r}")
    return _RULES[cfg.type](log_k, mask.bool(), cfg)


def behaviour_mismatch_metrics(
    log_k: Tensor, mask: Tensor, total_tokens: int | float | Tensor,
) -> dict[str, Tensor]:
    """mismatch/behaviour_kl_k3 and _k1 between mu and pi_old on loss tokens, each sum / T (0-d
    tensors, read with the micro-batch's other metrics: ``learner.masked.read_floats``)."""
    with torch.no_grad():
        mask = mask.bool()
        denom = torch.as_tensor(total_tokens, dtype=torch.float64, device=log_k.device).clamp(min=1)
        k3 = masked_mean(log_k.exp() - 1 - log_k, mask, count=denom)
        k1 = masked_mean(-log_k, mask, count=denom)
    return {"mismatch/behaviour_kl_k3": k3, "mismatch/behaviour_kl_k1": k1}


def correction_metrics(
    log_k: Tensor, weights: CorrectionWeights, mask: Tensor, total_tokens: int | float | Tensor,
) -> dict[str, Tensor]:
    """Weight and ratio statistics of one micro-batch (see the module docstring), each sum / T (0-d
    tensors, as :func:`behaviour_mismatch_metrics`)."""
    with torch.no_grad():
        mask = mask.bool()
        k = log_k.exp()
        denom = torch.as_tensor(total_tokens, dtype=torch.float64, device=k.device).clamp(min=1)
        empty = k.numel() == 0          # an all-False mask gives -inf / inf, as ratio_stats does
        vals = [
            masked_mean(weights.weight.to(torch.float64), mask, count=denom),
            masked_mean(k, mask, count=denom),
            k.new_tensor(float("-inf")) if empty else k.masked_fill(~mask, float("-inf")).amax(),
            k.new_tensor(float("inf")) if empty else k.masked_fill(~mask, float("inf")).amin(),
            masked_mean(weights.capped, mask, count=denom),
            masked_mean(weights.masked, mask, count=denom),
        ]
    keys = ["correction/weight/mean", "correction/ratio/mean", "correction/ratio/max",
            "correction/ratio/min", "correction/capped_frac", "correction/masked_frac"]
    return dict(zip(keys, vals))
