"""Reductions over the valid entries of a tensor: the one masked sum / mean / variance of the learner.

Every reduction of the math (group statistics of the advantages, RLOO and PRIME baselines, the
token-level loss terms and their metrics) goes through these, so "what counts" is decided once:

* an entry counts where ``mask`` (bool, the values' shape) is True; entries outside it never reach
  the result or its gradient, even when they hold NaN or inf (padding may: ``torch.where``, not a
  multiplication by the mask);
* a mean divides by the number of valid entries, or by a given ``count`` (the token-level loss
  divides by T_global, the mini-batch's tokens on all ranks, so splitting a mini-batch into
  micro-batches and ranks does not change it: DESIGN.md §4); the divisor is clamped to >= 1, so an
  empty mask gives 0, not NaN (PipelineRL's and OpenRLHF's ``masked_mean``);
* the variance is Bessel's (divisor n - 1, clamped to >= 1), as DESIGN.md §4 asks of the group std.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Sum of ``values`` where ``mask``, over all entries (``dim`` None) or along ``dim``."""
    kept = torch.where(mask, values, torch.zeros_like(values))
    return kept.sum() if dim is None else kept.sum(dim=dim, keepdim=keepdim)


def masked_count(mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Valid entries, over all (``dim`` None) or along ``dim`` (an integer tensor)."""
    return mask.sum() if dim is None else mask.sum(dim=dim, keepdim=keepdim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False,
                count: Tensor | float | None = None) -> Tensor:
    """sum(values where mask) / max(count, 1); ``count`` defaults to the valid entries along ``dim``."""
    if count is None:
        count = masked_count(mask, dim, keepdim)
    total = masked_sum(values, mask, dim, keepdim)
    return total / torch.as_tensor(count, device=total.device).clamp(min=1)


def masked_var(values: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Unbiased variance over the valid entries: sum((v - mean)^2) / max(n - 1, 1)."""
    mean = masked_mean(values, mask, dim, keepdim=True) if dim is not None else masked_mean(values, mask)
    deviation = (values - mean).square()
    return masked_sum(deviation, mask, dim, keepdim) / (masked_count(mask, dim, keepdim) - 1).clamp(min=1)


def read_floats(values: dict[str, Tensor]) -> dict[str, float]:
    """0-d tensors -> Python floats in one device-to-host read. Each ``.item()`` or ``.tolist()`` waits
    for the device to finish everything queued before it; a micro-batch's metrics read one at a time
    stalled the GPU between its forward and backward once per read."""
    if not values:
        return {}
    return dict(zip(values, torch.stack([v.to(torch.float64) for v in values.values()]).tolist()))
