"""Chunked log-probs + exact entropies: values, gradients, temperature, dtypes, layouts."""

import math

import pytest
import torch

from learner.logprobs import logprobs_and_entropy, naive_logprobs_and_entropy


def test_hand_computed_two_token_vocab():
    # logits [0, ln 3], tau 1: q = [1/4, 3/4]; logp(y=1) = ln 0.75 = -0.287682;
    # H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335.
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    logp, ent = logprobs_and_entropy(logits, torch.tensor([[1]]))
    assert logp.item() == pytest.approx(-0.287682, abs=1e-6) and ent.item() == pytest.approx(0.562335, abs=1e-6)
    # tau 2: z = [0, ln 3 / 2]; q = [1, sqrt 3] / (1 + sqrt 3) = [0.366025, 0.633975];
    # logp(y=1) = ln 0.633975 = -0.455746; H = 0.366025 * 1.005053 + 0.633975 * 0.455746 = 0.656806.
    logp, ent = logprobs_and_entropy(logits, torch.tensor([[1]]), temperature=2.0)
    assert logp.item() == pytest.approx(-0.455746, abs=1e-6) and ent.item() == pytest.approx(0.656806, abs=1e-6)


@pytest.mark.parametrize("tau", [1.0, 0.6])
@pytest.mark.parametrize("chunk", [1, 3, 5, 64])
def test_matches_categorical_and_log_softmax(tau, chunk):
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(2, 5, 17, generator=g)
    targets = torch.randint(0, 17, (2, 5), generator=g)
    logp, ent = logprobs_and_entropy(logits, targets, tau, chunk)
    ref_ent = torch.distributions.Categorical(logits=logits / tau).entropy()
    ref_logp = torch.log_softmax(logits / tau, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=1e-5)
    assert logp.dtype == ent.dtype == torch.float32 and logp.shape == (2, 5)


@pytest.mark.parametrize("chunk", [1, 4, 7, 100])
@pytest.mark.parametrize("which", ["both", "logp", "entropy"])
def test_chunked_gradients_equal_unchunked(chunk, which):
    g = torch.Generator().manual_seed(1)
    base = 2 * torch.randn(3, 7, 11, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 11, (3, 7), generator=g)
    w_lp, w_h = torch.randn(3, 7, generator=g, dtype=torch.float64), torch.randn(3, 7, generator=g, dtype=torch.float64)

    def grad_of(fn):
        x = base.clone().requires_grad_(True)
        logp, ent = fn(x)
        obj = {"both": (logp * w_lp).sum() + (ent * w_h).sum(), "logp": (logp * w_lp).sum(),
               "entropy": (ent * w_h).sum()}[which]
        obj.backward()
        return x.grad

    chunked = grad_of(lambda x: logprobs_and_entropy(x, targets, 0.7, chunk))
    naive = grad_of(lambda x: naive_logprobs_and_entropy(x, targets, 0.7))
    torch.testing.assert_close(chunked, naive, atol=1e-12, rtol=1e-10)


def test_gradcheck():
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 5, (2, 3))
    assert torch.autograd.gradcheck(lambda t: logprobs_and_entropy(t, y, 1.3, 2), (x,))


def test_non_contiguous_logits_slice():
    # The usual call site passes logits[:, :-1] (a non-contiguous view): no full copy, same result.
    g = torch.Generator().manual_seed(2)
    full = torch.randn(2, 6, 9, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 9, (2, 5), generator=g)
    logp, ent = logprobs_and_entropy(full[:, :-1], targets, 1.0, 3)
    (logp.sum() + ent.sum()).backward()
    grad = full.grad.clone()
    full.grad = None
    logp2, ent2 = naive_logprobs_and_entropy(full[:, :-1], targets)
    (logp2.sum() + ent2.sum()).backward()
    torch.testing.assert_close(logp, logp2)
    torch.testing.assert_close(grad, full.grad)
    assert (grad[:, -1] == 0).all()


def test_bf16_logits_computed_in_fp32():
    g = torch.Generator().manual_seed(3)
    logits = (2 * torch.randn(2, 4, 33, generator=g)).to(torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, 33, (2, 4), generator=g)
    logp, ent = logprobs_and_entropy(logits, targets, 1.0, 3)
    assert logp.dtype == torch.float32
    ref_logp, ref_ent = naive_logprobs_and_entropy(logits.detach().float(), targets)
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(ent, ref_ent)
    (logp.sum() + ent.sum()).backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad.float()).all()


def test_negative_targets_and_shape_errors():
    logits = torch.randn(1, 2, 4)
    logp, _ = logprobs_and_entropy(logits, torch.tensor([[-100, 2]]))
    torch.testing.assert_close(logp[0, 0], torch.log_softmax(logits[0, 0], -1)[0])   # read as id 0; masked later
    with pytest.raises(ValueError):
        logprobs_and_entropy(logits, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError):
        logprobs_and_entropy(logits, torch.zeros(1, 2, dtype=torch.long), temperature=0.0)


def test_bf16_gradient_at_a_confident_target_keeps_its_digits():
    # q_y ~ 0.99: d logp / d z_y = 1 - q_y must be formed in fp32 before the cast to bf16, not as
    # bf16(-q_y) + 1 (which keeps ~2 of its digits)
    logits = torch.zeros(1, 1, 8)
    logits[0, 0, 3] = 6.0
    x = logits.to(torch.bfloat16).requires_grad_(True)
    y = torch.tensor([[3]])
    logp, _ = logprobs_and_entropy(x, y, 1.0, 1)
    logp.sum().backward()
    ref = 1.0 - torch.softmax(x.detach().float(), -1)[0, 0, 3]
    assert float(ref) == pytest.approx(7 / (7 + math.exp(6)), rel=1e-3)
    assert float(x.grad[0, 0, 3]) == pytest.approx(float(ref), rel=1e-2)
