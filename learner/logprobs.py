"""Log-probs of the taken tokens and exact entropies from (B, L, V) logits, chunked.

With z = logits / tau, log q = z - logsumexp(z) (the temperature-tau policy):
    logp_t = log q_t[y_t]                 (log-prob of the taken token)
    H_t    = -sum_v q_t[v] log q_t[v]      (entropy of the full next-token distribution)

A naive implementation keeps fp32 (B*L, V) copies alive for backward (upcast, log_softmax,
softmax): ~10 GB each for 16K tokens x 152K vocabulary. :func:`logprobs_and_entropy` is a
custom autograd function that walks the tokens in chunks of ``chunk_size``: forward keeps
only the input logits (by reference) and two (B, L) vectors (logsumexp and H); backward
recomputes each chunk's softmax and writes its gradient straight into one preallocated
grad buffer of the logits' dtype, using

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


def _scaled(chunk: Tensor, dtype: torch.dtype, temperature: float) -> Tensor:
    """chunk / tau in the compute dtype; a view (no copy) when nothing changes, never mutate it."""
    chunk = chunk.to(dtype)
    return chunk if temperature == 1.0 else chunk / temperature


class _ChunkedLogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, chunk: int):
        B, L, _ = logits.shape
        cdt = _compute_dtype(logits)
        logp = logits.new_empty((B, L), dtype=cdt)
        entropy = logits.new_empty((B, L), dtype=cdt)
        lse = logits.new_empty((B, L), dtype=cdt)
        for rows, pos in _blocks(B, L, chunk):
            z = _scaled(logits[rows, pos], cdt, temperature)              # (b, l, V)
            m = z.amax(dim=-1, keepdim=True)                             # (b, l, 1)
            zm = z - m                                                   # (b, l, V) <= 0
            e = zm.exp()                                                 # (b, l, V)
            s = e.sum(dim=-1)                                            # (b, l)
            # H = log s - sum_v e_v (z_v - m) / s on max-shifted logits (no cancellation against
            # |z|); the dot product is a batched matmul, so no third (b, l, V) buffer.
            ez = (e.unsqueeze(-2) @ zm.unsqueeze(-1)).squeeze(-1).squeeze(-1)
            entropy[rows, pos] = s.log() - ez / s
            c_lse = m.squeeze(-1) + s.log()
            logp[rows, pos] = zm.gather(-1, targets[rows, pos].unsqueeze(-1)).squeeze(-1) - s.log()
            lse[rows, pos] = c_lse
            del z, zm, e
        ctx.save_for_backward(logits, targets, lse, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp: Tensor | None, g_entropy: Tensor | None):
        logits, targets, lse, entropy = ctx.saved_tensors
        if g_logp is None and g_entropy is None:
            return None, None, None, None
        tau, cdt = ctx.temperature, _compute_dtype(logits)
        B, L, _ = logits.shape
        grad = torch.empty_like(logits, memory_format=torch.contiguous_format)  # (B, L, V)
        for rows, pos in _blocks(B, L, ctx.chunk):
            z = _scaled(logits[rows, pos], cdt, tau)                     # (b, l, V)
            # Work in the grad slice itself when dtypes match (one fewer (b, l, V) buffer).
            dz = grad[rows, pos] if grad.dtype == cdt else torch.empty_like(z)
            logq = torch.sub(z, lse[rows, pos].unsqueeze(-1), out=dz)    # log q
            del z
            q = logq.exp()
            # dz = -q * (g_H * (log q + H) + g_logp), then dz[y] += g_logp
            if g_entropy is not None:
                g_h = g_entropy[rows, pos].unsqueeze(-1)
                shift = entropy[rows, pos].unsqueeze(-1) * g_h
                if g_logp is not None:
                    shift = shift + g_logp[rows, pos].unsqueeze(-1)
                logq.mul_(g_h).add_(shift)
            else:
                logq.copy_(g_logp[rows, pos].unsqueeze(-1).expand_as(logq))
            dz = logq.mul_(q).neg_()
            del q
            if g_logp is not None:
                dz.scatter_add_(-1, targets[rows, pos].unsqueeze(-1), g_logp[rows, pos].unsqueeze(-1))
            if tau != 1.0:
                dz.div_(tau)
            if dz.dtype != grad.dtype:
                grad[rows, pos] = dz
            del dz, logq
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
