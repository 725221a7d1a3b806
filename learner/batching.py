"""Groups -> training rows -> padded micro-batches, split by a token budget and across ranks.

A *row* is one response with its prompt: the model reads ``prompt + response[:-1]`` and the
logits at position t predict token t + 1, so response token j (at sequence position P + j) is
scored by the logits at position P + j - 1. Only response tokens are in the loss.

Splitting rules (what keeps the gradient independent of the split, see ``learner.loss``):
* groups stay whole inside a mini-batch (the schedule picks groups); rows of one mini-batch
  are then put into micro-batches of at most ``token_budget`` tokens, longest first: padded
  tokens (rows x longest row) on the padded path, real tokens when the rows are packed end to end
  (``learner.packing``: the model then reads one sequence without padding);
* micro-batches are dealt to data-parallel ranks balancing their tokens; every rank gets the
  *same number* of micro-batches (empty ones become a one-token dummy with an empty loss
  mask) because ZeRO-2/3 run collectives inside every backward/forward, and a rank that
  stopped early would deadlock the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from buffer.messages import Group
from learner.packing import Packed, pack


@dataclass
class Row:
    """One response as the learner trains on it."""

    prompt_ids: np.ndarray       # (P,) int32
    response_ids: np.ndarray     # (R,) int32, R >= 1
    old_logprobs: np.ndarray     # (R,) float32 pi_old: behaviour (vLLM) or recomputed
    advantage: float             # A_i, broadcast to every response token (unless token_advantages)
    version_start: int           # policy version that started sampling it
    version_end: int
    group_index: int             # index of its group in the step's rollout batch
    ref_logprobs: np.ndarray | None = None   # (R,) float32 frozen-reference log-probs (k3 KL)
    behaviour_logprobs: np.ndarray | None = None   # (R,) float32 mu, the actor's (old_logprobs until recomputed)
    reward: float | None = None                    # the verifier's reward of the response (PRIME's outcome label)
    token_advantages: np.ndarray | None = None     # (R,) float32 per-token A_t (PRIME); replaces `advantage`

    @property
    def input_len(self) -> int:
        """Tokens the model reads: prompt + response minus the last response token."""
        return len(self.prompt_ids) + len(self.response_ids) - 1

    @property
    def loss_tokens(self) -> int:
        return len(self.response_ids)


@dataclass
class MicroBatch:
    """Right-padded tensors of a few rows; every (B, L) tensor is aligned with the logits."""

    input_ids: Tensor       # (B, L) int64, pad 0
    attention_mask: Tensor  # (B, L) int64, 1 on real tokens
    targets: Tensor         # (B, L) int64 next token (-100 where no response token is predicted)
    loss_mask: Tensor       # (B, L) bool, positions that predict a response token (they enter T)
    old_logprobs: Tensor    # (B, L) float32, 0 outside loss_mask
    advantages: Tensor      # (B, L) float32, 0 outside loss_mask
    version_start: Tensor   # (B,) int64, every token of a row shares its response's version
    row_index: Tensor       # (B,) int64 index into the step's rows; -1 for the dummy row
    ref_logprobs: Tensor | None = None  # (B, L) float32
    behaviour_logprobs: Tensor | None = None  # (B, L) float32 mu (the actors') once pi_old is recomputed
    packed: Packed | None = None        # the rows end to end, for the model's forward (learner.packing)

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())


def rows_from_groups(
    groups: Sequence[Group],
    advantages: Sequence[np.ndarray],   # per group (N_g,) float advantage per response
    loss_masks: Sequence[np.ndarray],   # per group (N_g,) bool: the response enters the loss
) -> list[Row]:
    """Rows of the responses that enter the loss (group order, then response order).

    Masked responses (truncation masks, stale, rejected groups) and empty ones are left out:
    they would only cost forward/backward time for a zero contribution.
    """
    rows = []
    for gi, (g, adv, keep) in enumerate(zip(groups, advantages, loss_masks)):
        for r, a, k in zip(g.responses, adv, keep):
            if r.length == 0 or not k:
                continue
            behaviour = np.asarray(r.logprobs, dtype=np.float32)
            rows.append(Row(prompt_ids=np.asarray(g.prompt_ids, dtype=np.int32),
                            response_ids=np.asarray(r.token_ids, dtype=np.int32),
                            old_logprobs=behaviour, advantage=float(a), version_start=int(r.version_start),
                            version_end=int(r.version_end), group_index=gi, behaviour_logprobs=behaviour,
                            reward=float(r.reward)))
    return rows


def micro_batch_tokens(lengths: Sequence[int], packed: bool) -> int:
    """What a micro-batch of rows this long costs: its real tokens packed, rows x longest padded."""
    return sum(lengths) if packed else len(lengths) * max(lengths)


def split_micro_batches(lengths: Sequence[int], token_budget: int, packed: bool = False) -> list[list[int]]:
    """Row indices into micro-batches of <= token_budget tokens (``micro_batch_tokens``), longest first.

    Deterministic for given lengths (stable sort). A row longer than the budget gets a
    micro-batch of its own: sequences are never cut.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    tokens = 0                          # what the open micro-batch costs so far
    for i in order:
        # longest first: a padded micro-batch only grows a row wider, never longer
        grown = (tokens + lengths[i] if packed else (len(out[-1]) + 1) * lengths[out[-1][0]]) if out else 0
        if out and grown <= token_budget:
            out[-1].append(i)
            tokens = grown
        else:
            out.append([i])
            tokens = lengths[i]
    return out


def assign_to_ranks(micro_batches: list[list[int]], lengths: Sequence[int], world: int,
                    packed: bool = False) -> list[list[list[int]]]:
    """Deal micro-batches to ranks balancing their tokens; equal counts, padded with ``[]``."""
    per_rank = -(-len(micro_batches) // world) if micro_batches else 1
    cost = [micro_batch_tokens([lengths[i] for i in mb], packed) for mb in micro_batches]
    ranks: list[list[list[int]]] = [[] for _ in range(world)]
    load = [0] * world
    for j in sorted(range(len(micro_batches)), key=lambda j: -cost[j]):
        r = min((r for r in range(world) if len(ranks[r]) < per_rank), key=lambda r: (load[r], r))
        ranks[r].append(micro_batches[j])
        load[r] += cost[j]
    for r in ranks:
        r.extend([] for _ in range(per_rank - len(r)))
    return ranks


def plan_update(rows: Sequence[Row], row_indices: Sequence[int], token_budget: int,
                world: int, packed: bool = False) -> list[list[list[int]]]:
    """Rows of one mini-batch -> per rank, a list of micro-batches of step-row indices."""
    lengths = [rows[i].input_len for i in row_indices]
    local = split_micro_batches(lengths, token_budget, packed)
    per_rank = assign_to_ranks(local, lengths, world, packed)
    return [[[row_indices[i] for i in mb] for mb in mbs] for mbs in per_rank]


def collate(rows: Sequence[Row], indices: Sequence[int], pad_id: int = 0, packed: bool = False) -> MicroBatch:
    """Right-padded tensors for ``rows[indices]``; an empty ``indices`` gives a dummy micro-batch. ``packed``:
    also the rows end to end for the forward (``MicroBatch.packed``)."""
    mb = _padded(rows, indices, pad_id)
    if packed:
        mb.packed = pack(mb.input_ids, mb.attention_mask, mb.targets)
    return mb


def _padded(rows: Sequence[Row], indices: Sequence[int], pad_id: int) -> MicroBatch:
    if not indices:
        z = torch.zeros(1, 1, dtype=torch.long)
        f = torch.zeros(1, 1, dtype=torch.float32)
        b = torch.zeros(1, 1, dtype=torch.bool)
        return MicroBatch(z + pad_id, torch.ones_like(z), torch.full_like(z, -100), b, f, f.clone(),
                          torch.zeros(1, dtype=torch.long), torch.full((1,), -1))
    sel = [rows[i] for i in indices]
    B, L = len(sel), max(r.input_len for r in sel)
    with_ref = all(r.ref_logprobs is not None for r in sel)
    input_ids = np.full((B, L), pad_id, dtype=np.int64)
    attn = np.zeros((B, L), dtype=np.int64)
    targets = np.full((B, L), -100, dtype=np.int64)
    mask = np.zeros((B, L), dtype=bool)
    old = np.zeros((B, L), dtype=np.float32)
    adv = np.zeros((B, L), dtype=np.float32)
    ref = np.zeros((B, L), dtype=np.float32) if with_ref else None
    # mu travels only once pi_old was recomputed (it is pi_old otherwise)
    with_mu = all(r.behaviour_logprobs is not None and r.old_logprobs is not r.behaviour_logprobs for r in sel)
    mu = np.zeros((B, L), dtype=np.float32) if with_mu else None
    for b, r in enumerate(sel):
        seq = np.concatenate([r.prompt_ids, r.response_ids]).astype(np.int64)
        n, p, nr = r.input_len, len(r.prompt_ids), len(r.response_ids)
        input_ids[b, :n] = seq[:-1]
        attn[b, :n] = 1
        span = slice(p - 1, p - 1 + nr)            # logits positions that predict the response
        targets[b, span] = r.response_ids
        mask[b, span] = True
        old[b, span] = r.old_logprobs
        adv[b, span] = r.advantage if r.token_advantages is None else r.token_advantages
        if ref is not None:
            ref[b, span] = r.ref_logprobs
        if mu is not None:
            mu[b, span] = r.behaviour_logprobs
    return MicroBatch(
        input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attn),
        targets=torch.from_numpy(targets), loss_mask=torch.from_numpy(mask),
        old_logprobs=torch.from_numpy(old), advantages=torch.from_numpy(adv),
        version_start=torch.tensor([r.version_start for r in sel], dtype=torch.long),
        row_index=torch.tensor(list(indices), dtype=torch.long),
        ref_logprobs=None if ref is None else torch.from_numpy(ref),
        behaviour_logprobs=None if mu is None else torch.from_numpy(mu),
    )


def scatter_row_values(mb: MicroBatch, values: Tensor) -> dict[int, np.ndarray]:
    """(B, L) per-position values -> {row index: (R,) values at its response tokens}."""
    out = {}
    for b in range(mb.row_index.shape[0]):
        ri = int(mb.row_index[b])
        if ri >= 0:
            out[ri] = values[b][mb.loss_mask[b]].detach().to(torch.float32).cpu().numpy()
    return out
