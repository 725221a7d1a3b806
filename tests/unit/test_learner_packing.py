"""Packed micro-batches (learner/packing.py) against the padded path, on a real Qwen2 (random weights, fp32, CPU).

The same rows -- a row of one token, short and long ones, one exactly at the micro-batch budget -- go
through the learner's own forward (``learner.engine.micro_batch_logprobs``) padded and packed: the
log-probs and entropies of the response tokens, the loss summed over micro-batches with one global token
count, and its gradient agree to fp32 rounding, although packing splits the rows into other micro-batches.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.batching import Row, collate, plan_update, split_micro_batches
from learner.config import PolicyLossConfig
from learner.engine import micro_batch_logprobs
from learner.loss import PolicyLossInputs, policy_loss
from learner.packing import REPADDED, attention_implementation, pack

VOCAB, TAU = 97, 0.8
BUDGET = 96                          # real tokens per packed micro-batch, padded tokens per padded one
LOSS = PolicyLossConfig(eps_low=0.2, eps_high=0.28, logprob_chunk_size=16)


def _model(attention: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      attn_implementation=attention)
    return Qwen2ForCausalLM(cfg).float()


@pytest.fixture(scope="module")
def models():
    """The same weights loaded for each path: SDPA with a padding mask, and the packed rows' attention."""
    padded = _model("sdpa")
    packed = _model(attention_implementation("cpu"))
    packed.load_state_dict(padded.state_dict())
    return padded, packed


def _rows() -> list[Row]:
    rng = np.random.default_rng(3)
    shapes = [(1, 1), (3, 1), (2, 5), (4, 9), (1, BUDGET), (5, 30), (3, 17), (6, 2), (2, 44)]  # (prompt, response)
    rows = []
    for i, (p, r) in enumerate(shapes):
        rows.append(Row(prompt_ids=rng.integers(0, VOCAB, p).astype(np.int32),
                        response_ids=rng.integers(0, VOCAB, r).astype(np.int32),
                        old_logprobs=(-np.log(VOCAB) + 0.3 * rng.standard_normal(r)).astype(np.float32),
                        advantage=float(rng.normal()), version_start=0, version_end=0, group_index=i))
    return rows


def _loss_and_grads(model, rows, packed: bool):
    """Every micro-batch of the rows' plan through the learner's forward and loss, one global token count."""
    plan = plan_update(rows, list(range(len(rows))), BUDGET, 1, packed)[0]
    mbs = [collate(rows, idx, 0, packed) for idx in plan]
    total = sum(mb.num_loss_tokens for mb in mbs)
    model.zero_grad()
    loss_sum, logps, ents = 0.0, {}, {}
    for mb in mbs:
        logp, ent = micro_batch_logprobs(model, mb, torch.device("cpu"), TAU, LOSS.logprob_chunk_size)   # (B, L)
        inputs = PolicyLossInputs(logp, mb.old_logprobs, mb.advantages, mb.loss_mask, entropy=ent)
        loss, _ = policy_loss(inputs, LOSS, total, entropy_coef=0.01)
        loss.backward()
        loss_sum += loss.item()
        for b, ri in enumerate(mb.row_index.tolist()):
            logps[ri] = logp[b][mb.loss_mask[b]].detach()
            ents[ri] = ent[b][mb.loss_mask[b]].detach()
    return plan, loss_sum, logps, ents, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_pack_lays_rows_end_to_end_and_unpacks_back():
    ids = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [1, 2, 3, 4]])
    mask = (ids > 0).long()
    mask[1, 0] = 1
    mask[2] = 1
    targets = torch.arange(12).view(3, 4)
    p = pack(ids, mask, targets)
    assert p.input_ids.tolist() == [[5, 6, 7, 8, 1, 2, 3, 4]] and p.position_ids.tolist() == [[0, 1, 2, 0, 0, 1, 2, 3]]
    assert p.cu_seqlens.tolist() == [0, 3, 4, 8] and p.longest == 4
    assert p.targets.tolist() == [[0, 1, 2, 4, 8, 9, 10, 11]]
    values = torch.arange(1.0, 9.0)[None]
    assert p.unpack(values).tolist() == [[1, 2, 3, 0], [4, 0, 0, 0], [5, 6, 7, 8]]


def test_packed_micro_batches_fill_a_budget_of_real_tokens():
    lengths = [90, 40, 40, 30, 20, 5, 1]
    assert split_micro_batches(lengths, 96) == [[0], [1, 2], [3, 4, 5], [6]]             # rows x longest <= 96
    assert split_micro_batches(lengths, 96, packed=True) == [[0], [1, 2], [3, 4, 5, 6]]  # real tokens <= 96
    assert split_micro_batches([96, 97, 1], 96, packed=True) == [[1], [0], [2]]          # never cut: alone


def test_packed_forward_loss_and_gradient_match_the_padded_path(models):
    padded_model, packed_model = models
    rows = _rows()
    plan_p, loss_p, logp_p, ent_p, grad_p = _loss_and_grads(padded_model, rows, packed=False)
    plan_k, loss_k, logp_k, ent_k, grad_k = _loss_and_grads(packed_model, rows, packed=True)
    assert len(plan_k) < len(plan_p)                 # packing puts the same rows in fewer micro-batches
    assert packed_model.config._attn_implementation == REPADDED
    for ri in range(len(rows)):                      # a one-token row, the budget-long row, every other
        assert logp_k[ri].shape == (len(rows[ri].response_ids),)
        torch.testing.assert_close(logp_k[ri], logp_p[ri], atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(ent_k[ri], ent_p[ri], atol=2e-5, rtol=1e-5)
    assert loss_k == pytest.approx(loss_p, rel=1e-5, abs=1e-6)
    for name in grad_p:
        torch.testing.assert_close(grad_k[name], grad_p[name], atol=1e-5, rtol=1e-4)
