"""Properties of the loss as the learner uses it: logits -> chunked log-probs/entropy -> loss.

* splitting a mini-batch into micro-batches (unequal lengths, different padding) and summing
  gives the full-batch loss and gradient;
* simulated DeepSpeed (1/gas in backward, average over ranks) + deepspeed_loss_scale gives the
  full-batch gradient too;
* on-policy (logp_old = logp.detach()) the gradient is the plain policy gradient.
"""

import pytest
import torch

from learner.config import PolicyLossConfig
from learner.logprobs import logprobs_and_entropy
from learner.loss import PolicyLossInputs, count_tokens, deepspeed_loss_scale, policy_loss
from learner.reduce import reduce_metrics

V, D, TAU = 13, 8, 0.7
LENGTHS = [5, 3, 7, 2, 6, 4]
ADV = [1.2, -0.7, 0.5, -1.5, 0.9, -0.3]
CFG = PolicyLossConfig(eps_low=0.2, eps_high=0.28, dual_clip=3.0, kl_beta=0.05,
                       logprob_chunk_size=4)
ALPHA = 0.01


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(V, D, generator=g, dtype=torch.float64))
        self.head = torch.nn.Parameter(torch.randn(D, V, generator=g, dtype=torch.float64))

    def forward(self, ids):                       # (B, L) -> (B, L, V)
        return self.emb[ids] @ self.head


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(1)
    model = TinyLM()
    seqs = []
    for n, a in zip(LENGTHS, ADV):
        tok = torch.randint(0, V, (n + 1,), generator=g)
        with torch.no_grad():
            logp, _ = logprobs_and_entropy(model(tok[None, :-1]), tok[None, 1:], TAU)
        seqs.append(dict(inputs=tok[:-1], targets=tok[1:], adv=a,
                         old=logp[0] + 0.3 * torch.randn(n, generator=g, dtype=torch.float64),
                         ref=logp[0] + 0.2 * torch.randn(n, generator=g, dtype=torch.float64)))
    return seqs


def _batch(seqs, idx, pad_to):
    """Right-padded tensors; padding holds garbage (NaN log-probs, target -100) on purpose."""
    b = len(idx)
    out = dict(inputs=torch.zeros(b, pad_to, dtype=torch.long), targets=torch.full((b, pad_to), -100),
               old=torch.full((b, pad_to), float("nan"), dtype=torch.float64),
               ref=torch.full((b, pad_to), float("nan"), dtype=torch.float64),
               mask=torch.zeros(b, pad_to, dtype=torch.bool), adv=torch.tensor([seqs[i]["adv"] for i in idx]))
    for row, i in enumerate(idx):
        n = len(seqs[i]["inputs"])
        for k in ("inputs", "targets", "old", "ref"):
            out[k][row, :n] = seqs[i][k]
        out["mask"][row, :n] = True
    return out


def _micro_loss(model, batch, total_tokens, on_policy=False):
    logp, ent = logprobs_and_entropy(model(batch["inputs"]), batch["targets"], TAU,
                                     CFG.logprob_chunk_size)                          # (b, L) each
    old = logp.detach() if on_policy else batch["old"]
    inputs = PolicyLossInputs(logp, old, batch["adv"], batch["mask"], entropy=ent, ref_logprobs=batch["ref"])
    return policy_loss(inputs, CFG, total_tokens, ALPHA)


def _grads(model):
    return [p.grad.clone() for p in model.parameters()]


SPLIT = [[0], [1, 2], [3], [4, 5]]         # 4 micro-batches of unequal sizes and lengths


def test_micro_batch_split_invariance(data):
    T = sum(LENGTHS)
    full_model = TinyLM()
    full = _batch(data, range(6), pad_to=9)
    loss_full, m_full = _micro_loss(full_model, full, T)
    loss_full.backward()

    model = TinyLM()
    micro = [_batch(data, idx, pad_to=max(LENGTHS[i] for i in idx) + extra) for idx, extra in zip(SPLIT, [0, 3, 1, 2])]
    assert count_tokens([b["mask"] for b in micro]) == T
    total, metrics = 0.0, []
    for b in micro:
        loss, m = _micro_loss(model, b, T)
        loss.backward()
        total += loss.item()
        metrics.append(m)
    assert total == pytest.approx(loss_full.item(), abs=1e-10)
    for g, g_full in zip(_grads(model), _grads(full_model)):
        torch.testing.assert_close(g, g_full, atol=1e-9, rtol=0)
    merged = reduce_metrics(metrics)
    assert merged.keys() == m_full.keys()
    for k in m_full:
        assert merged[k] == pytest.approx(m_full[k], abs=1e-9), k
    assert merged["tokens/frac"] == pytest.approx(1.0)


def test_deepspeed_scaling_recovers_full_gradient(data):
    """2 ranks x 2 micro-batches with DeepSpeed semantics: loss/gas in backward, grads averaged."""
    T = sum(LENGTHS)
    full_model = TinyLM()
    _micro_loss(full_model, _batch(data, range(6), pad_to=7), T)[0].backward()

    ranks, gas, world = [SPLIT[:2], SPLIT[2:]], 2, 2
    scale = deepspeed_loss_scale(gas, world)
    t_global = sum(count_tokens([_batch(data, idx, 7)["mask"] for idx in rank]) for rank in ranks)  # all-reduce SUM
    assert t_global == T
    per_rank = []
    for rank in ranks:
        model = TinyLM()
        for idx in rank:
            loss, _ = _micro_loss(model, _batch(data, idx, pad_to=8), t_global)
            (loss * scale / gas).backward()                 # what engine.backward does with loss*scale
        per_rank.append(_grads(model))
    averaged = [sum(gs) / world for gs in zip(*per_rank)]   # DeepSpeed's data-parallel average
    for g, g_full in zip(averaged, _grads(full_model)):
        torch.testing.assert_close(g, g_full, atol=1e-9, rtol=0)


def test_on_policy_reduces_to_plain_policy_gradient(data):
    T = sum(LENGTHS)
    batch = _batch(data, range(6), pad_to=7)
    model = TinyLM()
    cfg_pg_only = CFG.model_copy(update={"kl_beta": 0.0})
    logp, _ = logprobs_and_entropy(model(batch["inputs"]), batch["targets"], TAU, 4)
    inputs = PolicyLossInputs(logp, logp.detach(), batch["adv"], batch["mask"])
    loss, m = policy_loss(inputs, cfg_pg_only, T)
    loss.backward()
    assert m["ratio/mean"] == pytest.approx(1.0) and m["clip/frac"] == 0.0
    # rho = 1: loss value is -(1/T) sum A, gradient is -(1/T) sum A grad log pi.
    assert loss.item() == pytest.approx(-sum(a * n for a, n in zip(ADV, LENGTHS)) / T)
    g_loss = _grads(model)

    ref_model = TinyLM()
    logp2, _ = logprobs_and_entropy(ref_model(batch["inputs"]), batch["targets"], TAU, 4)
    adv_tok = batch["adv"][:, None].to(torch.float64) * batch["mask"]
    (-(adv_tok * torch.where(batch["mask"], logp2, 0.0)).sum() / T).backward()
    for g, g_ref in zip(g_loss, _grads(ref_model)):
        torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=0)
