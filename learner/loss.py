"""Token-level clipped policy loss with global token normalisation (DESIGN.md §4).

For one micro-batch, with T the number of loss tokens of the *whole mini-batch* (all
micro-batches, all data-parallel ranks; :func:`count_tokens` + an all-reduce SUM):

    rho_t  = exp(logp_t - logp_old_t)
    obj_t  = min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)
    obj_t  = max(obj_t, c A_t)          if dual-clip c is set and A_t < 0
    kl_t   = exp(ref_t - logp_t) - (ref_t - logp_t) - 1          (k3)
    loss   = -(1/T) sum_t w_t obj_t + beta (1/T) sum_t kl_t - alpha (1/T) sum_t H_t

w_t = 1 unless ``cfg.correction`` selects a behaviour-policy correction (TIS, IcePop-style
masking, decoupled PPO; ``learner.corrections``): then w_t is a non-differentiated function of
pi_old / mu, mu the behaviour log-probs, and tokens it drops (w_t = 0) stay in T.

Every micro-batch contributes sum/T, so the micro-batch losses (and their gradients) add up
to exactly the full mini-batch loss, whatever the split or padding. Metrics follow the same
convention (see :func:`learner.reduce.reduce_metrics`); with ``inputs.lag`` (each row's update
lag) they include the per-lag-bucket statistics (``learner.lag.lag_bucket_values``). The log-ratio
is clamped at 20 (rho <= 5e8) so a garbage token cannot make the loss infinite; the tokens beyond
the clamp get no gradient and are counted in ``clip/ratio_clamped_frac``.

Gradient contract with DeepSpeed (0.19.8, ``runtime/engine.py``): ``engine.backward(loss)``
divides the loss by gradient_accumulation_steps (``scale_wrt_gas=True``) and the gradient
all-reduce averages over the data-parallel world. The sum over micro-batches and ranks we
want is therefore recovered by backpropagating ``loss * deepspeed_loss_scale(gas, world)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
from torch import Tensor

from learner.config import PolicyLossConfig
from learner.corrections import (
    behaviour_log_ratio,
    behaviour_mismatch_metrics,
    correction_metrics,
    correction_weights,
)
from learner.lag import drop_empty_buckets, lag_bucket_values, ratio_stat_values
from learner.masked import masked_mean, read_floats

# exp(20) ~ 5e8: beyond this a token is garbage; clamp (zero grad) not inf. A clamped token with
# A < 0 still adds ~5e8 |A| / T to the loss (no gradient): counted in ``clip/ratio_clamped_frac``.
_MAX_LOG_RATIO = 20.0


@dataclass
class PolicyLossInputs:
    logprobs: Tensor                    # (B, L) learner log pi_theta(y_t) at temperature tau, with grad
    old_logprobs: Tensor                # (B, L) log pi_old(y_t): behaviour (vLLM) or recomputed
    advantages: Tensor                  # (B, L) per token, or (B,) per response (broadcast)
    loss_mask: Tensor                   # (B, L) bool: response tokens that count (in T too)
    entropy: Tensor | None = None       # (B, L) H_t with grad; required when alpha > 0
    ref_logprobs: Tensor | None = None  # (B, L) frozen reference log-probs; required when beta > 0
    # (B, L) behaviour log mu(y_t) from the actors, when old_logprobs holds the learner's recomputed
    # pi_old: required by a correction; without one it only adds the mismatch/behaviour_* metrics
    behaviour_logprobs: Tensor | None = None
    # (B,) int update lag of each row (learner version - version_start): per-lag-bucket metrics
    lag: Tensor | None = None


def count_tokens(loss_masks: Tensor | Iterable[Tensor]) -> int:
    """Local loss-token count of a mini-batch: sum of its micro-batches' masks.

    The learner all-reduces (SUM) this over data-parallel ranks to get T_global and passes the
    same number to every :func:`policy_loss` call of the mini-batch.
    """
    if isinstance(loss_masks, Tensor):
        return int(loss_masks.sum())
    return sum(int(m.sum()) for m in loss_masks)


def deepspeed_loss_scale(grad_accum_steps: int, world_size: int, scale_wrt_gas: bool = True) -> float:
    """Factor to multiply each micro-batch loss by before ``engine.backward``.

    DeepSpeed produces grad = (1/world) sum_ranks sum_micro (1/gas if scale_wrt_gas) grad(loss_i).
    With loss_i = sum_i/T_global we want grad = sum_ranks sum_micro grad(loss_i), the exact
    full mini-batch gradient (what grad clipping at 1.0 must see): scale by gas * world (or by
    world alone with ``engine.backward(loss, scale_wrt_gas=False)``). Log the unscaled loss.
    """
    if grad_accum_steps < 1 or world_size < 1:
        raise ValueError(f"need gas >= 1 and world >= 1, got {grad_accum_steps}, {world_size}")
    return float(world_size * (grad_accum_steps if scale_wrt_gas else 1))


def ppo_clip_objective(ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) per token (clip-higher when eps_high > eps_low)."""
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return torch.minimum(ratio * advantages, clipped * advantages)


def dual_clip_objective(objective: Tensor, advantages: Tensor, c: float) -> Tensor:
    """For A < 0: max(objective, c A) (bounds the loss of tokens with rho > c); A >= 0 unchanged."""
    return torch.where(advantages < 0, torch.maximum(objective, c * advantages), objective)


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 >= 0 per token (Schulman 2020)."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def policy_loss(
    inputs: PolicyLossInputs,
    cfg: PolicyLossConfig,
    total_tokens: int | float | Tensor,
    entropy_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Micro-batch contribution to the mini-batch loss (formula in the module docstring).

    ``total_tokens`` is T_global (clamped to >= 1); ``entropy_coef`` is alpha_k from the entropy
    controller. Returns (loss, metrics); metrics are summable contributions (``learner.reduce``).
    """
    mask = inputs.loss_mask.bool()                                       # (B, L)
    logp = inputs.logprobs                                               # (B, L)
    adv = inputs.advantages
    adv = adv.unsqueeze(-1).expand_as(logp) if adv.dim() == 1 else adv
    adv = torch.where(mask, adv.to(logp.dtype), torch.zeros_like(logp))
    # Padding may hold garbage (inf/NaN) old log-probs: pin rho = 1 there so no NaN can leak.
    old = torch.where(mask, inputs.old_logprobs.to(logp.dtype), logp.detach())
    denom = torch.as_tensor(total_tokens, dtype=logp.dtype, device=logp.device).clamp(min=1)

    raw_log_ratio = logp - old
    log_ratio = raw_log_ratio.clamp(max=_MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)                                         # (B, L)
    obj = ppo_clip_objective(ratio, adv, cfg.eps_low, cfg.eps_high)
    if cfg.dual_clip is not None:
        obj = dual_clip_objective(obj, adv, cfg.dual_clip)
    log_k = weights = None
    if inputs.behaviour_logprobs is not None:                            # log pi_old/mu, no grad
        log_k = behaviour_log_ratio(inputs.old_logprobs, inputs.behaviour_logprobs, mask)
    if cfg.correction.type != "none":
        if log_k is None:
            raise ValueError(f"correction '{cfg.correction.type}' needs inputs.behaviour_logprobs")
        weights = correction_weights(log_k, mask, cfg.correction)
        obj = obj * weights.weight.to(obj.dtype)                         # w_t: no gradient
    pg = -masked_mean(obj, mask, count=denom)

    terms = {"loss/pg": pg}
    loss = pg
    if inputs.ref_logprobs is not None:
        ref = torch.where(mask, inputs.ref_logprobs.to(logp.dtype), logp.detach())
        kl = masked_mean(k3_kl(logp if cfg.kl_beta else logp.detach(), ref), mask, count=denom)
        loss = loss + cfg.kl_beta * kl if cfg.kl_beta else loss        # beta = 0: metric only
        terms |= {"kl/ref_k3": kl, "loss/kl": cfg.kl_beta * kl}
    elif cfg.kl_beta > 0:
        raise ValueError("kl_beta > 0 needs inputs.ref_logprobs")
    if inputs.entropy is not None:
        # alpha = 0: metric only, so no gradient reaches the entropy (backward skips that path)
        ent = masked_mean(inputs.entropy if entropy_coef else inputs.entropy.detach(), mask, count=denom)
        loss = loss - entropy_coef * ent if entropy_coef else loss
        terms |= {"entropy/mean": ent, "loss/entropy": -entropy_coef * ent}
    elif entropy_coef != 0:
        raise ValueError("entropy_coef != 0 needs inputs.entropy")
    terms["loss/total"] = loss

    with torch.no_grad():
        t64 = denom.to(torch.float64)              # counts and fractions in float64, not in bf16
        n_tok = mask.sum().to(torch.float64)
        values = {k: t.detach() for k, t in terms.items()} | {"tokens/frac": n_tok / t64, "tokens/count": n_tok}
        # tokens beyond the clamp: zero gradient, loss ~ 5e8 |A| / T when A < 0 (see _MAX_LOG_RATIO)
        values["clip/ratio_clamped_frac"] = ((raw_log_ratio.detach() > _MAX_LOG_RATIO) & mask).sum() / t64
        if cfg.dual_clip is not None:
            values["clip/dual_frac"] = ((adv < 0) & (ratio > cfg.dual_clip) & mask).sum() / t64
        overall = ratio_stat_values(logp.detach(), old, adv, mask, cfg.eps_low, cfg.eps_high, denom)
        values |= overall
        if inputs.lag is not None:
            values |= lag_bucket_values(logp.detach(), old, adv, mask, inputs.lag, cfg.eps_low, cfg.eps_high, denom,
                                        inputs.entropy, overall)
        if log_k is not None:
            values |= behaviour_mismatch_metrics(log_k, mask, denom)
            if weights is not None:
                values |= correction_metrics(log_k, weights, mask, denom)
        # one read for the micro-batch: every read waits for the device (learner.masked.read_floats)
        metrics = drop_empty_buckets(read_floats(values))
    return loss, metrics
