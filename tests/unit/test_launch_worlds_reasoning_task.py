"""The reasoning world's task generator: determinism, disjoint splits, the trace format, its length
span, and that math-verify (the RL reward) credits every gold trace and no corrupted one."""

from __future__ import annotations

import collections
import json
import random
import tempfile
from pathlib import Path

import pytest

from launch.worlds.reasoning.task import (
    K_MAX,
    K_MIN,
    PROMPT_TEMPLATE,
    SumProblem,
    gold_trace,
    make_problem,
    make_splits,
    problem_text,
    read_jsonl,
    write_jsonl,
)
from launch.worlds.tiny.build import VOCAB_SIZE
from launch.worlds.tokenizer import train_tokenizer
from rewards.config import RewardConfig
from rewards.math_reward import score_math_group
from rewards.problems import load_problems

CFG = RewardConfig(math_timeout_s=2.0, math_kill_grace_s=1.0)


@pytest.fixture(scope="module")
def splits() -> tuple[list[SumProblem], list[SumProblem]]:
    return make_splits(0, n_train=3000, n_val=256)


def test_gold_trace_hand_computed():
    assert gold_trace([17, 5, 32, 8]) == "b:17+5=22\nc:22+32=54\nd:54+8=62\n\\boxed{62}"
    assert gold_trace([99, 1]) == "b:99+1=100\n\\boxed{100}"
    assert problem_text([17, 5, 32, 8]) == "Add:\na=17\nb=5\nc=32\nd=8"


def test_problem_record():
    p = make_problem(random.Random(1), 7, k=4)
    assert p.k == 4 and len(p.operands) == 4
    assert p.answer == str(sum(p.operands)) and p.id == "sum-000007"
    assert p.prompt == PROMPT_TEMPLATE.format(problem=p.problem) == f"Q: {p.problem}\nA: "
    assert p.solution.endswith(f"\\boxed{{{p.answer}}}")
    assert p.solution.count("\n") == p.k - 1          # one line per addition, then the box
    assert all(1 <= x <= 9 for x in p.operands)


def test_splits_are_deterministic_and_seeded(splits):
    assert make_splits(0, n_train=3000, n_val=256) == splits
    other = make_splits(1, n_train=3000, n_val=256)
    assert [p.problem for p in other[1]] != [p.problem for p in splits[1]]


def test_splits_are_disjoint_and_sized(splits):
    train, val = splits
    assert len(train) == 3000 and len(val) == 256
    train_texts, val_texts = {p.problem for p in train}, {p.problem for p in val}
    assert len(val_texts) == len(val)                                          # no repeats in validation
    assert not train_texts & val_texts
    assert len({p.id for p in train + val}) == len(train) + len(val)


def test_every_k_appears_in_both_splits(splits):
    train, val = splits
    val_k = collections.Counter(p.k for p in val)
    assert set(val_k) == set(range(K_MIN, K_MAX + 1))
    assert max(val_k.values()) - min(val_k.values()) <= 1                       # validation balanced over k
    train_k = collections.Counter(p.k for p in train)
    assert set(train_k) == set(range(K_MIN, K_MAX + 1))
    assert min(train_k.values()) > 0.7 * len(train) / len(train_k)             # uniform k, short ones included


def test_trace_token_lengths_grow_with_k(splits):
    train, val = splits
    with tempfile.TemporaryDirectory() as d:
        tok = train_tokenizer([p.prompt + p.solution for p in train[:500]], Path(d), vocab_size=VOCAB_SIZE)
        by_k = collections.defaultdict(list)
        for p in val:
            by_k[p.k].append(len(tok(p.solution)["input_ids"]) + 1)          # + EOS
    # a line is letter, ':', total, '+', digit, '=', total, newline (one token per digit): 8-10 tokens
    assert 12 <= min(by_k[K_MIN]) and max(by_k[K_MIN]) <= 16
    assert 145 <= min(by_k[K_MAX]) and max(by_k[K_MAX]) <= 165
    means = [sum(v) / len(v) for _, v in sorted(by_k.items())]
    assert means == sorted(means)                                              # longer with every k
    lengths = [n for v in by_k.values() for n in v]
    assert 0.5 < sum(n > 64 for n in lengths) / len(lengths) < 0.75             # a 64-token stage cuts many
    assert 0.1 < sum(n > 128 for n in lengths) / len(lengths) < 0.3             # 128 a few
    assert max(lengths) <= 256                                                # a 256-token stage cuts none


def test_jsonl_round_trip_and_loader(splits, tmp_path):
    _, val = splits
    path = tmp_path / "val.jsonl"
    write_jsonl(val, path)
    assert read_jsonl(path) == val
    row = json.loads(path.read_text().splitlines()[0])
    assert set(row) == {"id", "data_source", "problem", "answer", "k"}
    loaded = load_problems(path)                                               # what the RL driver reads
    assert [(p.id, p.problem, p.answer, p.data_source) for p in loaded] == \
        [(p.id, p.problem, p.answer, p.data_source) for p in val]


def _corrupt(p: SumProblem) -> str:
    """The gold trace with the final running total (and so the box) off by one."""
    total = sum(p.operands)
    head, _ = p.solution.rsplit("\\boxed", 1)
    return head.replace(f"={total}\n", f"={total + 1}\n") + f"\\boxed{{{total + 1}}}"


def test_math_verify_credits_gold_traces_and_rejects_corrupted_ones(splits):
    _, val = splits
    for p in val[:64]:
        gold_ok, bad = score_math_group([p.solution, _corrupt(p)], p.answer, CFG)
        assert (gold_ok.reward, gold_ok.reason) == (1.0, "correct"), (p.problem, gold_ok)
        assert (bad.reward, bad.reason) == (0.0, "wrong"), (p.problem, bad)


def test_truncated_trace_earns_nothing(splits):
    _, val = splits
    p = next(q for q in val if q.k == 6)
    cut = p.solution[: p.solution.index("\\boxed")]                           # stopped before the box
    [r] = score_math_group([cut], p.answer, CFG)
    assert r.reward == 0.0 and r.reason == "no_box"
