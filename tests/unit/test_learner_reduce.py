"""One reduction rule for metrics: across micro-batches and ranks, then across a step's updates."""

import pytest

from learner.reduce import combine_updates, reduce_metrics, reduce_op


def test_reduce_op_by_key_name():
    assert [reduce_op(k) for k in ("ratio/max", "ratio/min", "loss/pg", "tokens/count")] == ["max", "min", "sum", "sum"]


def test_reduce_metrics_sums_per_token_values():
    out = reduce_metrics([{"loss/pg": 0.25, "ratio/max": 1.5, "ratio/min": 0.9},
                          {"loss/pg": 0.5, "ratio/max": 1.2, "ratio/min": 0.7}])
    assert out == {"loss/pg": 0.75, "ratio/max": 1.5, "ratio/min": 0.7}


def test_combine_updates_is_token_weighted():
    # entropy 1.0 over 10 tokens and 4.0 over 30: (10 + 120) / 40 = 3.25; max of maxes; counts add
    out = combine_updates([{"entropy/mean": 1.0, "ratio/max": 2.0, "ratio/min": 0.5, "tokens/count": 10},
                           {"entropy/mean": 4.0, "ratio/max": 1.5, "ratio/min": 0.7, "tokens/count": 30}], [10, 30])
    assert out == {"entropy/mean": pytest.approx(3.25), "ratio/max": 2.0, "ratio/min": 0.5, "tokens/count": 40}


def test_combine_updates_without_tokens_is_zero_not_nan():
    assert combine_updates([{"entropy/mean": 0.3}], [0]) == {"entropy/mean": 0.0}


def test_mismatch_kl_keeps_the_steps_first_update_beside_the_token_weighted_mean():
    # update 1 (the step's starting weights): k3 0.01 over 10 tokens; update 2 (learner moved): 0.05 over 30
    out = combine_updates([{"mismatch/kl_k3": 0.01, "mismatch/kl_k1": 0.02},
                           {"mismatch/kl_k3": 0.05, "mismatch/kl_k1": -0.01}], [10, 30])
    assert out["mismatch/kl_k3"] == pytest.approx((0.1 + 1.5) / 40)      # 0.04: the learner's movement too
    assert out["mismatch/start_kl_k3"] == 0.01 and out["mismatch/start_kl_k1"] == 0.02
    assert "mismatch/start_kl_k3" not in combine_updates([{"loss/pg": 1.0}], [5])
