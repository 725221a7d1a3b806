"""Log-probs of the taken tokens and exact entropies from (B, L, V) logits, chunked.

With z = logits / tau, log q = z - logsumexp(z) (the temperature-tau policy):
    logp_t = log q_t[y_t]                 (log-prob of the taken token)
    H_t    = -sum_v q_t[v] log q_t[v]      (entropy of the full next-token distribution)

A naive implementation keeps fp32 (B*L, V) copies alive for backward (upcast, log_softmax,
softmax): ~10 GB each for 16K tokens x 152K vocabulary. :func:`logprobs_and_entropy` is a
custom autograd function that walks the tokens in chunks of ``chunk_size``: forward keeps
only the input logits (by reference) and one (B, L) vector (H); backward recomputes each
chunk's softmax with torch's fused kernel (it reads bf16 logits and writes fp32 in one pass)
and writes its gradient straight into one preallocated grad buffer of the logits' dtype, using

    d logp_t / d z_t = onehot(y_t) - q_t
    d H_t    / d z_t = -q_t * (log q_t + H_t)
    d / d logits     = (d / d z) / tau

so peak extra memory is a few (chunk, V) fp32 buffers. Targets are the *next* tokens aligned
with the logits (the caller shifts); negative targets (e.g. -100 padding) are read as id 0,
mask those positions out downstream.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor


def _blocks(batch: int, length: int, chunk: int) -> Iterator[tuple[slice, slice]]:
    """Rectangles (rows, positions) covering (B, L) with at most ~``chunk`` tokens each."""
    if length >= chunk:
        for b in range(batch):
            for s in range(0, length, chunk):
                yield slice(b, b + 1), slice(s, min(s + chunk, length))
    else:
        rows = max(1, chunk // max(length, 1))
        for b in range(0, batch, rows):
            yield slice(b, min(b + rows, batch)), slice(0, length)


def _compute_dtype(logits: Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _over_vocab(normalise, chunk: Tensor, dtype: torch.dtype, temperature: float) -> Tensor:
    """``normalise`` (torch.softmax or torch.log_softmax) of chunk / tau over the vocabulary, in the compute
    dtype: one fused kernel that reads the logits' own dtype when tau is 1 (no upcast copy of the chunk)."""
    if temperature == 1.0:
        return normalise(chunk, dim=-1, dtype=dtype)
    return normalise(chunk.to(dtype) / temperature, dim=-1)


class _ChunkedLogProbEntropy(torch.autograd.Function):
    """Every pass over a (chunk, V) block is memory-bound (a 152K vocabulary): each op below is
    one pass, and the backward of the common case (entropy without gradient) takes four."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, chunk: int):
        B, L, _ = logits.shape
        cdt = _compute_dtype(logits)
        logp = logits.new_empty((B, L), dtype=cdt)
        entropy = logits.new_empty((B, L), dtype=cdt)
        for rows, pos in _blocks(B, L, chunk):
            logq = _over_vocab(torch.log_softmax, logits[rows, pos], cdt, temperature)       # (b, l, V)
            logp[rows, pos] = logq.gather(-1, targets[rows, pos].unsqueeze(-1)).squeeze(-1)
            # H = -sum_v q_v log q_v: every term >= 0, so nothing cancels; the dot product is a
            # batched matmul (no third (b, l, V) buffer)
            q = logq.exp()
            entropy[rows, pos] = -(q.unsqueeze(-2) @ logq.unsqueeze(-1)).squeeze(-1).squeeze(-1)
            del logq, q
        ctx.save_for_backward(logits, targets, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp: Tensor | None, g_entropy: Tensor | None):
        logits, targets, entropy = ctx.saved_tensors
        if g_logp is None and g_entropy is None:
            return None, None, None, None
        tau, cdt = ctx.temperature, _compute_dtype(logits)
        B, L, _ = logits.shape
        grad = torch.empty_like(logits, memory_format=torch.contiguous_format)  # (B, L, V)
        for rows, pos in _blocks(B, L, ctx.chunk):
            # d/dz = -q (g_H (log q + H) + g_logp), plus g_logp at the target; d/dlogits = d/dz / tau
            g_lp = None if g_logp is None else g_logp[rows, pos].unsqueeze(-1) / tau          # (b, l, 1)
            if g_entropy is None:
                dz = _over_vocab(torch.softmax, logits[rows, pos], cdt, tau).mul_(-g_lp)         # (b, l, V)
            else:
                dz = _over_vocab(torch.log_softmax, logits[rows, pos], cdt, tau)                 # log q
                q = dz.exp()
                g_h = g_entropy[rows, pos].unsqueeze(-1) / tau
                shift = entropy[rows, pos].unsqueeze(-1) * g_h
                if g_lp is not None:
                    shift = shift + g_lp
                dz.mul_(-g_h).sub_(shift).mul_(q)
                del q
            if g_lp is not None:        # in the compute dtype: 1 - q_y would lose its digits in bf16
                dz.scatter_add_(-1, targets[rows, pos].unsqueeze(-1), g_lp)
            grad[rows, pos] = dz
            del dz
        return grad, None, None, None


def logprobs_and_entropy(
    logits: Tensor,            # (B, L, V) any float dtype; grad flows back into it
    targets: Tensor,           # (B, L) int token ids aligned with the logits
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[Tensor, Tensor]:
    """(logp (B, L), entropy (B, L)) of softmax(logits / temperature), fp32 (fp64 for fp64 input).

    Exact (no sampling estimate); memory-bounded by ``chunk_size`` tokens per fp32 chunk.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"need logits (B, L, V) and targets (B, L), got {tuple(logits.shape)}, "
                         f"{tuple(targets.shape)}")
    if temperature <= 0 or chunk_size < 1:
        raise ValueError(f"need temperature > 0 and chunk_size >= 1, got {temperature}, {chunk_size}")
    targets = targets.long().clamp(min=0)
    return _ChunkedLogProbEntropy.apply(logits, targets, float(temperature), int(chunk_size))


def naive_logprobs_and_entropy(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Unchunked reference (full fp32 log_softmax kept for backward); for tests and benchmarks."""
    logq = torch.log_softmax(logits.to(_compute_dtype(logits)) / temperature, dim=-1)  # (B, L, V)
    logp = logq.gather(-1, targets.long().clamp(min=0).unsqueeze(-1)).squeeze(-1)    # (B, L)
    entropy = -(logq.exp() * logq).sum(dim=-1)                                         # (B, L)
    return logp, entropy
