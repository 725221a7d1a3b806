"""Token-level clipped policy loss: clip-higher, dual-clip, k3 KL, entropy term, metrics."""

import math

import pytest
import torch

from learner.config import PolicyLossConfig
from learner.loss import (
    PolicyLossInputs,
    count_tokens,
    deepspeed_loss_scale,
    k3_kl,
    policy_loss,
)


def _tokens(ratios, advantages, **extra):
    """One row of tokens with logp_old = 0 and logp = log(rho), so rho is exactly the given ratio."""
    logp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logp, old_logprobs=torch.zeros_like(logp.detach()),
        advantages=torch.tensor([advantages], dtype=torch.float64),
        loss_mask=torch.ones_like(logp, dtype=torch.bool), **extra)
    return logp, inputs


def _loss_and_grad(ratios, advantages, total_tokens=None, entropy_coef=0.0, **cfg):
    logp, inputs = _tokens(ratios, advantages)
    loss, metrics = policy_loss(inputs, PolicyLossConfig(**cfg), total_tokens or len(ratios), entropy_coef)
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), metrics


def test_clip_higher_asymmetry():
    # rho = 1.25, A = +1, T = 1. eps_high 0.2: min(1.25, 1.2) = 1.2 -> loss -1.2, clipped: no gradient.
    loss, grad, m = _loss_and_grad([1.25], [1.0], eps_high=0.2)
    assert loss == pytest.approx(-1.2) and grad == [0.0]
    assert m["clip/high_frac"] == 1.0
    # eps_high 0.28: 1.25 < 1.28 -> loss -1.25; d loss / d logp = -A rho = -1.25.
    loss, grad, m = _loss_and_grad([1.25], [1.0], eps_high=0.28)
    assert loss == pytest.approx(-1.25) and grad == pytest.approx([-1.25])
    assert m["clip/high_frac"] == 0.0


def test_four_token_loss_gradient_and_clip_metrics():
    # eps_low 0.2, eps_high 0.28, T = 4.
    # t1 rho 1.25 A +1: clip 1.25           -> obj  1.25 (grad path, d obj = A rho = 1.25)
    # t2 rho 0.70 A -1: clip 0.8; min(-0.7, -0.8) = -0.8 -> clipped low (no grad)
    # t3 rho 1.10 A -1: clip 1.1            -> obj -1.10 (d obj = -1.1)
    # t4 rho 0.50 A +1: clip 0.8; min(0.5, 0.8) = 0.5   -> unclipped (d obj = 0.5)
    # loss = -(1.25 - 0.8 - 1.1 + 0.5) / 4 = 0.0375; grad = -(d obj)/4 = [-0.3125, 0, 0.275, -0.125]
    loss, grad, m = _loss_and_grad([1.25, 0.7, 1.1, 0.5], [1.0, -1.0, -1.0, 1.0], eps_low=0.2, eps_high=0.28)
    assert loss == pytest.approx(0.0375)
    assert grad == pytest.approx([-0.3125, 0.0, 0.275, -0.125])
    assert m["loss/pg"] == pytest.approx(0.0375) and m["loss/total"] == pytest.approx(0.0375)
    assert m["clip/low_frac"] == pytest.approx(0.25)         # t2 only
    assert m["clip/high_frac"] == 0.0
    assert m["ratio/below_band_frac"] == pytest.approx(0.5)  # t2 and t4 (t4 not clipped: A > 0)
    assert m["ratio/above_band_frac"] == 0.0
    assert m["ratio/mean"] == pytest.approx(3.55 / 4)
    assert m["ratio/max"] == pytest.approx(1.25) and m["ratio/min"] == pytest.approx(0.5)
    assert m["tokens/count"] == 4 and m["tokens/frac"] == 1.0


def test_dual_clip():
    # A = -1, rho = 4, c = 3: min(-4, -1.2) = -4; max(-4, -3) = -3 -> loss 3, gradient 0.
    loss, grad, m = _loss_and_grad([4.0], [-1.0], dual_clip=3.0)
    assert loss == pytest.approx(3.0) and grad == [0.0] and m["clip/dual_frac"] == 1.0
    # Without dual-clip: loss 4, d loss / d logp = -A rho = 4.
    loss, grad, _ = _loss_and_grad([4.0], [-1.0])
    assert loss == pytest.approx(4.0) and grad == pytest.approx([4.0])
    # rho = 2 < c: dual-clip inactive: loss 2, grad 2.
    loss, grad, _ = _loss_and_grad([2.0], [-1.0], dual_clip=3.0)
    assert loss == pytest.approx(2.0) and grad == pytest.approx([2.0])
    # A > 0 is never dual-clipped: rho 4 -> min(4, 1.2) = 1.2.
    loss, _, _ = _loss_and_grad([4.0], [1.0], dual_clip=3.0)
    assert loss == pytest.approx(-1.2)


def test_k3_kl_values_and_gradient():
    # t1: logp = log .5, ref = log .25: d = ref - logp = -ln 2; k3 = 0.5 + ln 2 - 1 = 0.193147
    # t2: logp = log .2, ref = log .4:  d = +ln 2;          k3 = 2 - ln 2 - 1 = 0.306853
    logp_v = torch.tensor([[math.log(0.5), math.log(0.2)]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.25), math.log(0.4)]], dtype=torch.float64)
    torch.testing.assert_close(k3_kl(logp_v, ref), torch.tensor([[0.193147, 0.306853]], dtype=torch.float64),
                               atol=1e-6, rtol=0)
    # In the loss with A = 0, beta = 0.1, T = 2: loss = 0.1 * 0.5 / 2 = 0.025.
    # d k3 / d logp = 1 - exp(d) = [0.5, -1] -> grad = beta / T * that = [0.025, -0.05].
    logp = logp_v.clone().requires_grad_(True)
    inputs = PolicyLossInputs(logp, logp_v.clone(), torch.zeros(1, 2, dtype=torch.float64),
                              torch.ones(1, 2, dtype=torch.bool), ref_logprobs=ref)
    loss, m = policy_loss(inputs, PolicyLossConfig(kl_beta=0.1), total_tokens=2)
    loss.backward()
    assert loss.item() == pytest.approx(0.025)
    assert logp.grad[0].tolist() == pytest.approx([0.025, -0.05])
    assert m["kl/ref_k3"] == pytest.approx(0.25) and m["loss/kl"] == pytest.approx(0.025)


def test_entropy_term_uses_global_token_count():
    # H = [1, 2] on this micro-batch, T_global = 4 (other micro-batches hold 2 more tokens), alpha 0.01:
    # loss term = -0.01 * 3 / 4 = -0.0075; d loss / d H = -0.01 / 4 = -0.0025; entropy/mean part = 0.75.
    ent = torch.tensor([[1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    logp, inputs = _tokens([1.0, 1.0], [0.0, 0.0], entropy=ent)
    loss, m = policy_loss(inputs, PolicyLossConfig(), total_tokens=4, entropy_coef=0.01)
    loss.backward()
    assert loss.item() == pytest.approx(-0.0075)
    assert ent.grad[0].tolist() == pytest.approx([-0.0025, -0.0025])
    assert m["entropy/mean"] == pytest.approx(0.75) and m["loss/entropy"] == pytest.approx(-0.0075)
    assert m["tokens/frac"] == pytest.approx(0.5)


def test_padding_garbage_never_leaks():
    # Second position is padding with NaN/inf old/ref log-probs: loss and gradient stay finite, grad 0 there.
    logp = torch.tensor([[math.log(1.1), 0.3]], dtype=torch.float64, requires_grad=True)
    inputs = PolicyLossInputs(
        logp, torch.tensor([[0.0, float("nan")]], dtype=torch.float64), torch.tensor([1.0]),
        torch.tensor([[True, False]]), ref_logprobs=torch.tensor([[0.0, float("inf")]], dtype=torch.float64))
    loss, m = policy_loss(inputs, PolicyLossConfig(kl_beta=0.1), total_tokens=1)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0
    assert all(math.isfinite(v) for v in m.values())
    # (B,) advantages broadcast like (B, L): obj = 1.1 -> loss -1.1 + 0.1 * k3(ln 1.1).
    assert m["loss/pg"] == pytest.approx(-1.1)


def test_empty_micro_batch_still_backpropagates():
    logp = torch.zeros(1, 3, requires_grad=True)
    inputs = PolicyLossInputs(logp, torch.zeros(1, 3), torch.ones(1, 3), torch.zeros(1, 3, dtype=torch.bool))
    loss, m = policy_loss(inputs, PolicyLossConfig(), total_tokens=0)
    loss.backward()
    assert loss.item() == 0.0 and (logp.grad == 0).all() and m["tokens/count"] == 0


def test_missing_inputs_raise():
    _, inputs = _tokens([1.0], [1.0])
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(inputs, PolicyLossConfig(kl_beta=0.1), 1)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(inputs, PolicyLossConfig(), 1, entropy_coef=0.1)


def test_count_tokens_and_deepspeed_scale():
    masks = [torch.tensor([[1, 1, 0]], dtype=torch.bool), torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)]
    assert count_tokens(masks) == 5 and count_tokens(masks[0]) == 2
    assert deepspeed_loss_scale(4, 2) == 8.0                      # undo 1/gas and the 1/world average
    assert deepspeed_loss_scale(4, 2, scale_wrt_gas=False) == 2.0
    with pytest.raises(ValueError):
        deepspeed_loss_scale(0, 1)


def test_zero_coefficients_keep_terms_out_of_the_graph():
    # alpha = 0 and beta = 0: entropy and KL are reported but receive no gradient.
    ent = torch.tensor([[0.5]], dtype=torch.float64, requires_grad=True)
    logp, inputs = _tokens([1.0], [1.0], entropy=ent, ref_logprobs=torch.tensor([[-0.1]], dtype=torch.float64))
    loss, m = policy_loss(inputs, PolicyLossConfig(), total_tokens=1, entropy_coef=0.0)
    loss.backward()
    assert ent.grad is None and logp.grad[0].tolist() == pytest.approx([-1.0])   # plain PG: -A rho
    assert m["entropy/mean"] == 0.5 and m["kl/ref_k3"] > 0 and m["loss/kl"] == 0.0


def test_tokens_beyond_the_log_ratio_clamp_are_counted():
    # log rho = [25, 20, 0.1, 30 (padding)], A = [-1, -1, +1, -1], T = 4 (one more token elsewhere).
    # t1: log rho 25 > 20: clamped to rho = e^20, obj = min(-e^20, -0.8) = -e^20 -> loss e^20 / 4, no gradient;
    # t2: exactly at the clamp (not beyond): obj = -e^20 too, but the gradient passes, -A rho / T = e^20 / 4;
    # t3: plain: obj = min(e^0.1, 1.2) = e^0.1 (1.105 < 1.2), grad -e^0.1 / 4.
    logp = torch.tensor([[25.0, 20.0, 0.1, 30.0]], dtype=torch.float64, requires_grad=True)
    inputs = PolicyLossInputs(logp, torch.zeros(1, 4, dtype=torch.float64),
                              torch.tensor([[-1.0, -1.0, 1.0, -1.0]], dtype=torch.float64),
                              torch.tensor([[True, True, True, False]]))
    loss, m = policy_loss(inputs, PolicyLossConfig(), total_tokens=4)
    loss.backward()
    e20 = math.exp(20.0)
    assert loss.item() == pytest.approx((2 * e20 - math.exp(0.1)) / 4)
    assert logp.grad[0].tolist() == pytest.approx([0.0, e20 / 4, -math.exp(0.1) / 4, 0.0])
    assert m["clip/ratio_clamped_frac"] == 0.25           # t1 only: the padding's 30 does not count
    _, none = policy_loss(PolicyLossInputs(logp.detach(), logp.detach(), torch.ones(1, 4),
                                           torch.ones(1, 4, dtype=torch.bool)), PolicyLossConfig(), 4)
    assert none["clip/ratio_clamped_frac"] == 0.0


def test_clip_fractions_are_verls_and_dual_clip_counts_apart():
    # eps_low 0.2, eps_high 0.28, dual-clip c = 3, T = 6. verl: pg_losses = -A rho, pg_losses2 = -A clip(rho);
    # pg_clipfrac = mean(pg_losses2 > pg_losses); pg_clipfrac_lower (dual) = mean((max(...) > -A c) & A < 0).
    # t1 rho 1.5 A +1: -1.28 > -1.5 clipped high     obj  1.28 (no grad)
    # t2 rho 1.5 A -1:  1.28 >  1.5 no               obj -1.5  (grad -A rho / T = 1.5 / 6 = 0.25)
    # t3 rho 0.5 A -1:  0.8  >  0.5 clipped low      obj -0.8  (no grad)
    # t4 rho 0.5 A +1: -0.8  > -0.5 no               obj  0.5  (grad -0.5 / 6)
    # t5 rho 4.0 A -1:  1.28 >  4   no; 4 > 3 dual   obj max(-4, -3) = -3 (no grad)
    # t6 rho 1.5 A  0: nothing clipped               obj  0
    # loss = -(1.28 - 1.5 - 0.8 + 0.5 - 3 + 0) / 6 = 3.52 / 6
    loss, grad, m = _loss_and_grad([1.5, 1.5, 0.5, 0.5, 4.0, 1.5], [1.0, -1.0, -1.0, 1.0, -1.0, 0.0],
                                   eps_low=0.2, eps_high=0.28, dual_clip=3.0)
    assert loss == pytest.approx(3.52 / 6)
    assert grad == pytest.approx([0.0, 0.25, 0.0, -0.5 / 6, 0.0, 0.0])
    assert m["clip/high_frac"] == pytest.approx(1 / 6) and m["clip/low_frac"] == pytest.approx(1 / 6)
    assert m["clip/frac"] == pytest.approx(2 / 6)            # verl's pg_clipfrac
    assert m["clip/dual_frac"] == pytest.approx(1 / 6)       # verl's pg_clipfrac_lower
    assert m["ratio/above_band_frac"] == pytest.approx(4 / 6) and m["ratio/below_band_frac"] == pytest.approx(2 / 6)


def test_one_rank_or_two_ranks_or_two_micro_batches_give_the_same_loss_and_gradient():
    # Mini-batch: response a (1 token, rho 1.1, A +1) and b (3 tokens, rho 1.0, 0.9, 0.7, A -1); eps 0.2, T = 4.
    # obj: a 1.1; b -1, -0.9, min(-0.7, -0.8) = -0.8 (clipped low). Loss = -(1.1 - 2.7) / 4 = 0.4.
    # Every log-prob is base + theta (theta = 0), so d loss / d theta = sum of the token gradients -A rho / T
    # over unclipped tokens: -1.1/4 + 1.0/4 + 0.9/4 = 0.2. Per-rank T (1 and 3) would give
    # (-1.1 + 0.9) / 2 = -0.1 instead: the global T is what keeps the split out of the gradient.
    rows = {"a": ([1.1], 1.0), "b": ([1.0, 0.9, 0.7], -1.0)}

    def micro_loss(theta, names, total):
        n = max(len(rows[k][0]) for k in names)
        logp = torch.zeros(len(names), n, dtype=torch.float64)
        mask = torch.zeros(len(names), n, dtype=torch.bool)
        for i, k in enumerate(names):
            logp[i, :len(rows[k][0])] = torch.log(torch.tensor(rows[k][0], dtype=torch.float64))
            mask[i, :len(rows[k][0])] = True
        adv = torch.tensor([rows[k][1] for k in names], dtype=torch.float64)
        inputs = PolicyLossInputs(logp + theta, torch.zeros_like(logp), adv, mask)
        return policy_loss(inputs, PolicyLossConfig(), total)[0]

    theta = torch.zeros((), dtype=torch.float64, requires_grad=True)
    full = micro_loss(theta, ["a", "b"], 4)
    full.backward()
    assert full.item() == pytest.approx(0.4) and theta.grad.item() == pytest.approx(0.2)

    # 2 ranks, one micro-batch each, DeepSpeed semantics: backward(loss * world), gradients averaged.
    scale = deepspeed_loss_scale(1, 2, scale_wrt_gas=False)
    per_rank_losses, per_rank_grads = [], []
    for names in (["a"], ["b"]):
        theta = torch.zeros((), dtype=torch.float64, requires_grad=True)
        loss = micro_loss(theta, names, 4)                     # T_global = 1 + 3 (all-reduced)
        (loss * scale).backward()
        per_rank_losses.append(loss.item())
        per_rank_grads.append(theta.grad.item())
    assert per_rank_losses == pytest.approx([-0.275, 0.675]) and sum(per_rank_losses) == pytest.approx(0.4)
    assert sum(per_rank_grads) / 2 == pytest.approx(0.2)

    # 1 rank, 2 micro-batches, DeepSpeed's default backward (loss / gas): scale by gas.
    scale = deepspeed_loss_scale(2, 1)
    theta = torch.zeros((), dtype=torch.float64, requires_grad=True)
    for names in (["b"], ["a"]):
        (micro_loss(theta, names, 4) * scale / 2).backward()
    assert theta.grad.item() == pytest.approx(0.2)
