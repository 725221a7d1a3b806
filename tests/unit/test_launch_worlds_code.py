"""The code world's task and preset (no build): problems, their tests through the verl loader, splits."""

from __future__ import annotations

import json

import pytest

from launch.worlds.code.task import code_item, make_splits
from rewards.code_reward import parse_test_spec
from rewards.verl_format import code_spec


def test_a_code_problem_holds_its_program_and_tests():
    item = code_item("call", "minus", 7)
    assert item.user == "f(x) = x minus 7" and item.solution == "```python\ndef f(x):\n    return x-7\n```"
    assert item.messages == [{"role": "system", "content": "python"}, {"role": "user", "content": "f(x) = x minus 7"}]
    tests = parse_test_spec(code_spec(item.row["reward_model"]["ground_truth"]))
    assert [(t.kind, t.fn_name, t.args, want) for t, want in tests] == [
        ("call", "f", [3], -4), ("call", "f", [10], 3), ("call", "f", [-4], -11)]
    stdio = parse_test_spec(code_spec(code_item("stdio", "times", 3).row["reward_model"]["ground_truth"]))
    assert [(t.stdin, want) for t, want in stdio] == [("3\n", "9\n"), ("10\n", "30\n"), ("-4\n", "-12\n")]
    asserts = parse_test_spec(code_spec(code_item("assert", "plus", 2).row["reward_model"]["ground_truth"]))
    assert [t.code for t, _ in asserts] == ["assert g(3) == 5", "assert g(10) == 12", "assert g(-4) == -2"]


def test_splits_are_disjoint_balanced_and_seeded():
    s = make_splits(0)
    ids = lambda items: {i.id for i in items}            # noqa: E731
    assert not ids(s.val) & ids(s.train) and not ids(s.val) & ids(s.warmup)
    assert sum(i.is_code for i in s.train) == sum(not i.is_code for i in s.train) == 300
    assert sum(i.is_code for i in s.val) == sum(not i.is_code for i in s.val) == 60
    assert [i.id for i in make_splits(0).train] == [i.id for i in s.train]
    assert [i.id for i in make_splits(1).train] != [i.id for i in s.train]
    assert json.dumps(s.train[0].row)                    # plain JSON rows


def test_code_flag_scales_any_preset():
    from launch.run.compose import build_config

    cfg, _ = build_config(["--code", "--preset", "offpolicy_reuse4"], "onpolicy")
    assert cfg.world == "code" and cfg.learner.batch.rollout_batch == 16 and cfg.learner.batch.n_sgd == 16
    assert cfg.group_size == 8 and cfg.data.stages[0].max_tokens == 32 and cfg.data.chat_template
    mixed, _ = build_config(["--code", "--preset", "mixed_math_code"], "onpolicy")
    assert mixed.rewards.code_all_or_nothing and mixed.rewards.num_workers == 2 and mixed.steps == 40
    with pytest.raises(SystemExit):
        build_config(["--code", "--tiny"], "onpolicy")
