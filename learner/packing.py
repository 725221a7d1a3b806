"""Packed micro-batches: the rows of a micro-batch laid end to end in one sequence, so the model's
projections, MLPs and vocabulary head (most of the compute) see real tokens only, never padding.

    padded  (B, L):  [p p r r r . . .]        packed  (1, N), N = real tokens:  [p p r r r p r r r r p r]
                     [p r r r r . . .]        position_ids restart at every row: [0 1 2 3 4 0 1 2 3 4 0 1]
                     [p r . . . . . .]

A packed micro-batch is derived from the padded one (``learner.batching.collate``): the same rows, the
same loss mask, targets and old log-probs; only the model's forward reads the packed tensors, and its
per-position outputs are put back into the padded layout (:meth:`Packed.unpack`), so the loss, its token
normalisation across micro-batches and ranks, the entropy and every metric are computed exactly as on
the padded path. Micro-batches are filled to a budget of real tokens (``learner.batching.plan_update``).

Attention stays inside each row. On CUDA with flash-attn installed: its variable-length kernel
(``flash_attention_2``; the row boundaries from ``position_ids`` / ``cu_seq_lens``). Elsewhere
(CPU, and CUDA without flash-attn): :func:`repadded_attention`, registered with transformers as
``lagrl_repadded``: the rows' queries, keys and values are gathered back into a (rows, heads, longest
row, head dim) batch, attended with SDPA's causal kernel (right-padded rows need no mask under a
causal one: a real position never sees a later pad), and scattered back: attention costs what it
costs on the padded path, everything else runs on real tokens. transformers builds no attention mask
for an implementation it does not know (``masking_utils``), so no (N, N) mask is ever made.

Equivalence: on CPU in fp32 the packed log-probs and entropies differ from the padded path's by
rounding only (the same rows through matmuls of other shapes: ~1e-7 absolute), tested in
tests/unit/test_learner_packing.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

REPADDED = "lagrl_repadded"


def repadded_attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, scaling=None,
                       dropout: float = 0.0, **kwargs) -> tuple[Tensor, None]:
    """Causal attention inside each row of a packed sequence: q (1, H, N, d), k/v (1, H_kv, N, d), the rows'
    layout in ``lagrl_slots`` (S, Lmax) (packed position of each row position; pads: 0) and ``lagrl_keep``
    (N,) (flat S * Lmax index of each packed position). Returns (1, N, H, d) as transformers expects."""
    slots, keep = kwargs["lagrl_slots"], kwargs["lagrl_keep"]
    rows, longest = slots.shape
    q, k, v = (x[0][:, slots].transpose(0, 1) for x in (query, key, value))      # (S, H, Lmax, d)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if module.training else 0.0, is_causal=True,
                                         scale=scaling, enable_gqa=q.shape[1] != k.shape[1])    # (S, H, Lmax, d)
    out = out.transpose(1, 2).reshape(rows * longest, out.shape[1], out.shape[-1])[keep]       # (N, H, d)
    return out.unsqueeze(0), None


def attention_implementation(device: str) -> str:
    """The attention that keeps a packed sequence's rows apart on ``device`` (registered with transformers)."""
    if device == "cuda":
        try:
            import flash_attn  # noqa: F401 - flash-attn's varlen kernel: the anchors' packing on GPU
            return "flash_attention_2"
        except ImportError:
            pass
    from transformers import AttentionInterface

    AttentionInterface.register(REPADDED, repadded_attention)
    return REPADDED


@dataclass
class Packed:
    """The model's inputs for a packed micro-batch (see the module docstring); derived by :func:`pack`."""

    input_ids: Tensor       # (1, N) int64 the real tokens of every row, end to end
    position_ids: Tensor    # (1, N) int64 restarting at 0 at every row
    targets: Tensor         # (1, N) int64 next token of each real position (-100 where none is scored)
    slots: Tensor           # (B, L) int64 packed position of each padded slot; pads 0
    keep: Tensor            # (N,) int64 flat index (b * L + t) of each packed position
    real: Tensor            # (B, L) bool the padded slots that hold a real token
    cu_seqlens: Tensor      # (B + 1,) int32 row boundaries (flash-attn's varlen layout)
    longest: int

    def model_kwargs(self, device) -> dict:
        """The forward's keyword arguments: the packed sequence and both layouts of its row boundaries."""
        cu = self.cu_seqlens.to(device)
        return {"input_ids": self.input_ids.to(device), "position_ids": self.position_ids.to(device),
                "lagrl_slots": self.slots.to(device), "lagrl_keep": self.keep.to(device),
                "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": self.longest, "max_length_k": self.longest}

    def unpack(self, values: Tensor) -> Tensor:
        """(1, N) per-position values -> (B, L) in the padded layout, 0 at pads (differentiable)."""
        flat = values.new_zeros(self.real.numel()).index_copy(0, self.keep.to(values.device), values[0])
        return flat.view(self.real.shape)


def pack(input_ids: Tensor, attention_mask: Tensor, targets: Tensor) -> Packed:
    """The packed form of a right-padded micro-batch ((B, L) tensors: tokens, 1 on real positions, targets)."""
    real = attention_mask.bool()                                                  # (B, L)
    lengths = real.sum(dim=1)                                                     # (B,)
    keep = real.flatten().nonzero().squeeze(1)                                    # (N,)
    order = torch.cumsum(real.flatten().long(), 0).view(real.shape) - 1           # packed position of each slot
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    return Packed(input_ids=input_ids[real][None], position_ids=(torch.cumsum(real.long(), 1) - 1)[real][None],
                  targets=targets[real][None], slots=torch.where(real, order, 0), keep=keep, real=real,
                  cu_seqlens=cu, longest=int(lengths.max()) if len(lengths) else 0)
