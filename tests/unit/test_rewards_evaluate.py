"""avg@n / pass@k: the estimator against hand-computed values, and the AIME files end to end."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from rewards.config import RewardConfig
from rewards.evaluate import curve_ks, evaluate_completions, evaluate_results, pass_at_k, summarize
from rewards.problems import default_data_dir, load_problems
from rewards.result import RewardResult

T, F = True, False


@pytest.mark.parametrize("n,c,k,expected", [
    (4, 1, 1, 0.25),
    (4, 1, 2, 1 - 3 / 6),          # 1 - C(3,2)/C(4,2)
    (5, 2, 3, 1 - 1 / 10),         # 1 - C(3,3)/C(5,3)
    (4, 0, 4, 0.0),
    (4, 3, 2, 1.0),                # n - c < k: every draw of 2 contains a correct one
    (1024, 1, 1, 1 / 1024),
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_exact_binomials():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 64)
        c, k = rng.randint(0, n), rng.randint(1, n)
        exact = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert 0.0 <= pass_at_k(10_000, 3, 5000) <= 1.0  # large n: no overflow
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_pass_at_k_against_enumeration():
    # pass@k = the fraction of the C(n, k) k-subsets of the n samples that hold a correct one.
    for n in range(1, 9):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n, ks", [
    (1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]),
    (32, [1, 2, 4, 8, 16, 32]), (48, [1, 2, 4, 8, 16, 32, 48]),
])
def test_curve_ks(n, ks):
    assert curve_ks(n) == ks


def test_pass_at_k_curve_by_hand():
    # n = 4; problem A 1 correct, problem B 2 correct.
    #   k=1: (1/4 + 2/4)/2 = 0.375;  k=2: A 1 - C(3,2)/C(4,2) = 1/2, B 1 - C(2,2)/C(4,2) = 5/6 -> 2/3;
    #   k=4: both solved at least once -> 1.
    report = summarize([[T, F, F, F], [T, T, F, F]], ks=curve_ks(4))
    assert report.pass_at_k == pytest.approx({1: 0.375, 2: 2 / 3, 4: 1.0})
    with pytest.raises(ValueError):
        curve_ks(0)


def test_load_aime_files():
    for name in ("aime24", "aime25"):
        problems = load_problems(default_data_dir() / f"{name}.jsonl")
        assert len(problems) == 30 and {p.data_source for p in problems} == {name}
        assert all(p.answer and p.problem and p.id.startswith(name) for p in problems)
    assert load_problems("aime24") == load_problems("aime24.jsonl")


def test_load_any_path(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"id": 1, "problem": "1+1?", "answer": "2"}) + "\n\n")
    [p] = load_problems(path)
    assert (p.id, p.data_source, p.answer) == ("1", "mine", "2")
    path.write_text(json.dumps({"id": 1, "problem": "?"}) + "\n")
    with pytest.raises(ValueError, match="answer"):
        load_problems(path)


def _completions(answer: str, n_correct: int, n: int = 4) -> list[str]:
    wrong = [r"\boxed{999999}", "I could not finish.", r"<think>\boxed{" + answer + "}"]  # AIME: 0-999
    return [rf"Reasoning ... so the answer is \boxed{{{answer}}}." for _ in range(n_correct)] + \
        [wrong[i % len(wrong)] for i in range(n - n_correct)]


def test_aime_avg_at_n_with_synthetic_completions():
    """aime24: problem i gets i % 5 correct of 4 -> c cycles 0..4; aime25: only problem 0, 4 of 4.

    By hand, per c in (0, 1, 2, 3, 4) with n = 4:
      pass@1 = c/4            -> mean 0.5
      pass@2 = 1 - C(4-c,2)/6 -> 0, 1/2, 5/6, 1, 1 -> mean (10/3)/5 = 2/3
      pass@4 = [c > 0]        -> mean 4/5
    """
    aime24, aime25 = load_problems("aime24"), load_problems("aime25")
    completions = [_completions(p.answer, i % 5) for i, p in enumerate(aime24)]
    completions += [_completions(p.answer, 4 if i == 0 else 0) for i, p in enumerate(aime25)]
    report = evaluate_completions(aime24 + aime25, completions, ks=(1, 2, 4), cfg=RewardConfig())
    a24, a25 = report.by_source["aime24"], report.by_source["aime25"]
    assert (a24.n_problems, a24.n_samples) == (30, 120)
    assert a24.avg_at_n == pytest.approx(0.5)
    assert a24.pass_at_k == pytest.approx({1: 0.5, 2: 2 / 3, 4: 0.8})
    assert a25.avg_at_n == pytest.approx(1 / 30) and a25.pass_at_k[4] == pytest.approx(1 / 30)
    assert report.avg_at_n == pytest.approx((15 + 1) / 60)
    assert report.pass_at_k == pytest.approx({1: 16 / 60, 2: (20 + 1) / 60, 4: (24 + 1) / 60})
    table = report.format()
    assert "aime24" in table and "50.00%" in table and "pass@4" in table


def test_evaluate_results_and_errors():
    ok, bad = RewardResult(1.0, "correct", "1"), RewardResult(0.0, "wrong", "2")
    report = evaluate_results([[ok, bad], [bad, bad], [ok, ok, ok]], ["a", "a", "b"], ks=(1, 2))
    assert report.avg_at_n == pytest.approx((0.5 + 0 + 1) / 3)
    assert report.by_source["b"].pass_at_k[2] == 1.0
    with pytest.raises(ValueError, match="k <= n"):
        summarize([[True, False]], ks=(3,))
    with pytest.raises(ValueError):
        summarize([[True]], data_sources=["a", "b"])
    with pytest.raises(ValueError):
        summarize([])


def test_read_jsonl_names_the_bad_line_and_tolerates_only_a_torn_tail(tmp_path):
    from rewards.problems import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3')
    with pytest.raises(ValueError, match=r"rows.jsonl:4: not JSON"):
        read_jsonl(path)
    assert read_jsonl(path, allow_torn_tail=True) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n[1, 2]\n{"a": 3}\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: expected a JSON object, got list"):
        read_jsonl(path, allow_torn_tail=True)
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')                   # not the tail: always an error
    with pytest.raises(ValueError, match=r"rows.jsonl:2"):
        read_jsonl(path, allow_torn_tail=True)
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")
