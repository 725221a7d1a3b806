"""learner.masked: the one masked sum / mean / variance (hand-computed values)."""

from __future__ import annotations

import math

import torch

from learner.masked import masked_count, masked_mean, masked_sum, masked_var

T, F = True, False
VALUES = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]])
MASK = torch.tensor([[T, T, F], [T, F, T]])


def test_padding_never_reaches_the_result_even_nan_or_inf():
    assert masked_sum(VALUES, MASK).item() == 13.0
    assert masked_sum(VALUES, MASK, dim=1).tolist() == [3.0, 10.0]
    assert masked_count(MASK, dim=1).tolist() == [2, 2]
    assert masked_mean(VALUES, MASK).item() == 13.0 / 4
    assert masked_mean(VALUES, MASK, dim=1).tolist() == [1.5, 5.0]
    assert masked_mean(VALUES, MASK, dim=1, keepdim=True).shape == (2, 1)


def test_a_given_count_divides_instead_the_global_token_count():
    # T_global = 10 tokens on all ranks, 4 of them here: this micro-batch contributes 13 / 10
    assert math.isclose(masked_mean(VALUES, MASK, count=10).item(), 1.3, rel_tol=1e-6)
    assert masked_mean(VALUES, MASK, count=torch.tensor(10.0, dtype=torch.float64)).dtype == torch.float64


def test_empty_mask_gives_zero_not_nan():
    none = torch.zeros_like(MASK)
    assert masked_mean(VALUES, none).item() == 0.0 and masked_mean(VALUES, none, count=0).item() == 0.0
    assert masked_mean(VALUES, none, dim=1).tolist() == [0.0, 0.0]
    assert masked_var(VALUES, none).item() == 0.0


def test_variance_is_bessel_corrected():
    # row 0: {1, 2}: mean 1.5, sum of squares 0.5, / (2 - 1) = 0.5; row 1: {4, 6}: 2 / 1 = 2
    assert masked_var(VALUES, MASK, dim=1).tolist() == [0.5, 2.0]
    # all four {1, 2, 4, 6}: mean 3.25, squares 5.0625 + 1.5625 + 0.5625 + 7.5625 = 14.75, / 3
    assert math.isclose(masked_var(VALUES, MASK).item(), 14.75 / 3, rel_tol=1e-6)
    one = torch.tensor([[T, F, F], [F, F, F]])
    assert masked_var(VALUES, one, dim=1).tolist() == [0.0, 0.0]          # n - 1 clamped to 1


def test_gradient_flows_only_through_valid_entries():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    masked_mean(x, torch.tensor([T, F, T])).backward()
    assert x.grad.tolist() == [0.5, 0.0, 0.5]
