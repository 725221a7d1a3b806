"""Extra prompts per step within a waste budget (launch.run.over_issue), against hand-computed binomials."""

import pytest

from launch.run.over_issue import RejectRate, expected_surplus, extra_prompts


def test_expected_surplus_is_the_binomial_sum_by_hand():
    assert expected_surplus(1, 17, 0.15) == pytest.approx(0.85 ** 17)                 # only L = 0 leaves one over
    assert expected_surplus(2, 18, 0.15) == pytest.approx(2 * 0.85 ** 18 + 18 * 0.15 * 0.85 ** 17)
    assert expected_surplus(0, 10, 0.3) == 0.0


def test_extra_prompts_is_the_largest_count_within_the_budget():
    # D_R 16, p 0.15, 0.5%: e = 1 leaves 0.063 <= 0.085; e = 2 leaves 0.277 > 0.09
    assert extra_prompts(16, 0.15, 0.005) == 1
    # D_R 32, p 0.05, 1%: e = 1 leaves 0.95^33 = 0.184 <= 0.33; e = 2 leaves 2 * 0.95^34 + 34 * 0.05 * 0.95^33 = 0.662 > 0.34
    assert extra_prompts(32, 0.05, 0.01) == 1
    assert extra_prompts(32, 0.05, 0.005) == 0           # 0.184 > 0.165: not even one
    assert extra_prompts(32, 0.0, 0.01) == 0 and extra_prompts(32, 0.2, 0.0) == 0
    assert extra_prompts(4, 0.99, 0.2) <= 4               # never more than D_R


def test_reject_rate_counts_the_last_window_of_steps():
    rate = RejectRate(window=2)
    assert rate.rate == 0.0
    rate.record(0, used=8, lost=8)
    rate.record(1, used=8, lost=0)
    rate.record(2, used=8, lost=2)                         # step 0 leaves the window
    assert rate.rate == pytest.approx(2 / 18)
    rate.record(2, used=8, lost=2)                         # the same step again: no double count
    assert rate.rate == pytest.approx(2 / 18)
