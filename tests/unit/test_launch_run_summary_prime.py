"""The run summary's PRIME lines: the PRM's held-out accuracies and the prompt filter's share."""

import pytest

from launch.run.summary import format_summary, prime_summary


def test_prime_summary_reads_the_prm_rows():
    assert prime_summary([{"step": 0, "reward/mean": 0.3}]) is None
    rows = [{"step": s, "prm/loss": 0.69, "prm/accuracy": a, "prm/pairwise_accuracy": p, "groups/filtered": f,
             "prompts/filtered_frac": f / (f + 4)} for s, (a, p, f) in enumerate([(0.0, 0.5, 4), (0.6, 0.7, 0),
                                                                                    (0.5, 0.6, 4)])]
    p = prime_summary(rows)
    assert p["prm_pairwise_accuracy"] == [0.5, 0.6] and p["prm_pairwise_accuracy_mean"] == pytest.approx(0.65)
    assert p["prm_accuracy_mean"] == pytest.approx(0.55)            # the first row (PRM = reference) left out
    assert p["filtered_groups"] == 8 and p["filtered_frac_mean"] == pytest.approx(1 / 3)
    summary = {"run_id": "r", "preset": "skyt1_prime", "run_path": "/x", "steps": 3, "steps_total": 3,
               "stop_reason": "completed", "seconds": 5.0, "accuracy": None, "eval_n": None, "eval_problems": None,
               "train_accuracy": None, "entropy": None, "length": None, "lag_mean": None, "lag_max": None,
               "groups": {"trained": 1, "zero_advantage_dropped": 0, "stale_dropped": 0, "stale_responses_dropped": 0},
               "guard": None, "prime": p}
    assert "PRIME PRM     held-out pairwise accuracy mean 0.650" in format_summary(summary)
