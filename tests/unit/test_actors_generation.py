"""How a generation actor groups the groups an engine step finished into reward calls (actors.reward_calls)."""

from __future__ import annotations

import dataclasses
import json

from actors.reward_calls import scoring_calls
from rewards.config import RewardConfig
from rewards.scoring import may_run_code, resolve_kind
from bench.synthetic import make_group

SPEC = json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]})


def _group(i: int, answer: str = "4", data_source: str = "tiny_arith"):
    return dataclasses.replace(make_group(f"g{i}", n=2, tokens=3), answer=answer, data_source=data_source)


def test_math_groups_share_at_most_width_calls_and_each_goes_alone_up_to_it():
    cfg = RewardConfig()
    groups = [_group(i) for i in range(7)]
    assert scoring_calls(groups, 3, cfg) == [[0, 3, 6], [1, 4], [2, 5]]
    assert scoring_calls(groups[:2], 3, cfg) == [[0], [1]]
    assert scoring_calls(groups, 1, cfg) == [list(range(7))]
    assert scoring_calls([], 4, cfg) == []


def test_a_group_that_may_run_code_goes_alone():
    # by data source (a code_data_sources prefix, any case) or by an answer that looks like a JSON test spec;
    # its sandboxes may take seconds, and a call returns all its groups at once
    cfg = RewardConfig()
    groups = [_group(0), _group(1, data_source="LiveCodeBench/v5"), _group(2), _group(3, answer="  \n" + SPEC),
              _group(4), _group(5, answer="{1, 2}")]
    assert scoring_calls(groups, 2, cfg) == [[1], [3], [5], [0, 4], [2]]
    # the data source routes by the pool's own config: without code sources, group 1 is math
    assert scoring_calls(groups, 2, cfg.model_copy(update={"code_data_sources": ()})) == [[3], [5], [0, 2], [1, 4]]


def test_may_run_code_covers_every_group_resolve_kind_sends_to_the_sandbox():
    cfg = RewardConfig()
    cases = [("4", "tiny_arith"), ("\\frac{1}{2}", "math"), ("{1, 2}", "math"), (SPEC, "math"), (" " + SPEC, ""),
             ("4", "mbpp"), ("4", "Code_contests"), ('{"answer": 3}', "gsm8k"), ("[1, 2]", "")]
    for answer, source in cases:
        if resolve_kind(answer, source, cfg=cfg) == "code":
            assert may_run_code(answer, source, cfg), (answer, source)
    assert not may_run_code("4", "tiny_arith", cfg) and not may_run_code("\\frac{1}{2}", "math", cfg)
    assert may_run_code("{1, 2}", "math", cfg)          # not a spec, but not parsed to find out: goes alone
