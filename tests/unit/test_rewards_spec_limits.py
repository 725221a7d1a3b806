"""Code test specs at load (rewards.spec_limits, rewards.problems): a spec the sandbox cannot run as written,
one over the size limits, and a line that cannot be read are rejected rows with their row number (and
``bad_rows="skip"`` loads the others); tests beyond code_max_tests are cut with one line saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rewards.code_reward import parse_test_spec, score_code, spec_text
from rewards.config import RewardConfig
from rewards.problems import load_problem_set, load_problems, read_jsonl
from rewards.spec_limits import MAX_NESTING, SpecLimits, bound_spec

SMALL = SpecLimits.of(RewardConfig(code_max_tests=3, code_max_test_bytes=4096, code_max_spec_bytes=8192))
GOOD_GT = {"inputs": ["1 2\n"], "outputs": ["3\n"]}


def verl_row(gt, i: int = 0) -> dict:
    return {"data_source": "taco", "prompt": [{"role": "user", "content": f"Solve {i}."}], "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": gt}, "extra_info": {"index": i}}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def deep(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def stdio_tests(n: int, size: int = 1) -> dict:
    return {"tests": [{"type": "stdio", "input": "x" * size, "output": str(i)} for i in range(n)]}


# each bad ground truth between two good rows: the row number names it, skip keeps the good ones; the
# size cases under SMALL limits (the others need none: they fail with any limits)
BAD_GROUND_TRUTHS = {
    "tests-int": ({"tests": 5}, "'tests' is a int, not a list", None),
    "tests-null": ({"tests": None}, "'tests' is a NoneType, not a list", None),
    "deep-text": ('{"inputs": [' + deep(5000) + '], "outputs": [1], "fn_name": "f"}', "nested too deep", None),
    "deep-args": ({"inputs": [[json.loads(deep(MAX_NESTING + 5))]], "outputs": [1], "fn_name": "f"},
                  f"deeper than {MAX_NESTING} levels", None),
    "stdio-object": ({"tests": [{"type": "stdio", "input": {"a": 1}, "output": "1"}]}, "tests[0] input is a dict",
                     None),
    "args-string": ({"tests": [{"type": "call", "fn_name": "f", "args": "abc", "expected": 1}]},
                    "args must be a list of arguments, got str", None),
    "oversized-test": ({"inputs": ["x" * 5000], "outputs": ["1"]}, "over code_max_test_bytes (4096 bytes)", SMALL),
    "oversized-spec": (stdio_tests(3, 3000), "over 8192 bytes (code_max_spec_bytes", SMALL),
}


@pytest.mark.parametrize("name", sorted(BAD_GROUND_TRUTHS))
def test_a_bad_code_ground_truth_is_a_rejected_row_and_skip_loads_the_others(name, tmp_path):
    gt, reason, limits = BAD_GROUND_TRUTHS[name]
    rows = [verl_row(g, i) for i, g in enumerate([GOOD_GT, gt, GOOD_GT])]
    path = write_lines(tmp_path / "code.jsonl", [json.dumps(r) for r in rows])
    extra = {"limits": limits} if limits else {}
    loaded = load_problem_set(path, **extra)
    assert [r.row for r in loaded.rejected] == [2] and reason in loaded.rejected[0].reason, loaded.rejected
    with pytest.raises(ValueError, match=r"1 row\(s\) rejected \(row 2: "):
        load_problems(path, **extra)
    logged: list[str] = []
    kept = load_problems(path, bad_rows="skip", log=logged.append, **extra)
    assert [p.id for p in kept] == ["code-0", "code-2"] and "row 2: " in logged[0]


def test_unreadable_lines_are_rejected_rows_with_their_line(tmp_path):
    """Not JSON, nested too deep for the decoder, not an object: rows numbered over the non-blank lines
    as before (a blank line is no row), the reason naming the file's line."""
    lines = [json.dumps(verl_row(GOOD_GT, 0)), "", "{not json", '{"a": ' + deep(5000) + "}", "[1, 2]",
             json.dumps(verl_row(GOOD_GT, 5))]
    path = write_lines(tmp_path / "mixed.jsonl", lines)
    loaded = load_problem_set(path)
    assert loaded.format == "verl" and loaded.indices == [0, 4]
    assert [(r.row, r.reason) for r in loaded.rejected] == [
        (2, "mixed.jsonl:3: not JSON (Expecting property name enclosed in double quotes)"),
        (3, "mixed.jsonl:4: nested too deep to read"), (4, "mixed.jsonl:5: expected a JSON object, got list")]
    assert [p.id for p in load_problems(path, bad_rows="skip", log=lambda _: None)] == ["mixed-0", "mixed-5"]
    flat = write_lines(tmp_path / "flat.jsonl", ['{"problem": "1+1", "answer": "2"}', f'{{"problem": {deep(5000)}}}'])
    rejected = load_problem_set(flat).rejected
    assert [(r.row, r.reason) for r in rejected] == [(2, "flat.jsonl:2: nested too deep to read")]
    with pytest.raises(ValueError, match=r"flat.jsonl:2: nested too deep to read"):   # metrics files stay strict
        read_jsonl(flat)


def test_filter_difficulty_keeps_its_records_aligned_past_an_unreadable_line(tmp_path):
    from launch.experiments.filter_difficulty import read_records

    path = write_lines(tmp_path / "in.jsonl", ['{"problem": "1+1", "answer": "2"}', "not json",
                                               '{"problem": "2+2", "answer": "4"}'])
    with pytest.raises(ValueError, match=r"row 2: in.jsonl:2: not JSON .*--bad_rows skip"):
        read_records(path, "problem", "answer")
    records, problems = read_records(path, "problem", "answer", bad_rows="skip")
    assert records[1] == {} and problems[1] is None and [problems[0].answer, problems[2].answer] == ["2", "4"]


def test_tests_beyond_code_max_tests_are_cut_with_one_line(tmp_path):
    spec = stdio_tests(5)
    path = write_lines(tmp_path / "many.jsonl", [json.dumps(verl_row(g, i)) for i, g in enumerate([GOOD_GT, spec])])
    logged: list[str] = []
    problems = load_problems(path, limits=SMALL, log=logged.append)
    assert len(parse_test_spec(problems[1].answer)) == 3 and len(parse_test_spec(problems[0].answer)) == 1
    assert len(logged) == 1 and "1 code problem(s) have more than 3 tests, cut to their first 3" in logged[0]
    assert "rows 2)" in logged[0]
    assert [t.stdin for t, _ in parse_test_spec(problems[1].answer)] == ["x"] * 3


def test_a_flat_row_whose_answer_is_a_test_spec_is_checked_and_cut(tmp_path):
    too_big = {"inputs": ["x" * 5000], "outputs": ["1"]}
    answers = [json.dumps(stdio_tests(5)), json.dumps({"tests": 5}), json.dumps(too_big), "{1, 2}",
               json.dumps({"asserts": "assert f(1) == 1"})]
    rows = [{"problem": f"p{i}", "answer": a} for i, a in enumerate(answers)]
    path = write_lines(tmp_path / "flat.jsonl", [json.dumps(r) for r in rows])
    loaded = load_problem_set(path, limits=SMALL)
    assert [r.row for r in loaded.rejected] == [2, 3, 5], loaded.rejected
    assert "'tests' must be a list, got int" in loaded.rejected[0].reason
    assert "over code_max_test_bytes" in loaded.rejected[1].reason
    assert "'asserts' must be a list, got str" in loaded.rejected[2].reason           # not one assert per character
    assert loaded.cut_rows == [1] and len(parse_test_spec(loaded.problems[0].answer)) == 3
    assert loaded.problems[1].answer == "{1, 2}"                                       # a math answer, untouched


@pytest.mark.parametrize("spec,message", [
    ({"tests": 5}, "'tests' must be a list, got int"),
    ({"tests": None}, "'tests' must be a list, got NoneType"),
    ({"tests": [3]}, "tests[0] is a int, not a test object"),
    ({"tests": [{"type": "stdio", "input": {"a": 1}, "output": "1"}]}, "tests[0] input is a dict"),
    ({"tests": [{"type": "stdio", "input": "1", "output": [1, 2]}]}, "tests[0] output is a list"),
    ({"inputs": [{"a": 1}], "outputs": ["1"]}, "inputs[0] is a dict"),
    ({"tests": [{"type": "call", "fn_name": "f", "args": "abc"}]}, "args must be a list of arguments, got str"),
    ({"tests": [{"type": "call", "fn_name": "not valid", "args": []}]}, "is not a Python identifier"),
    ({"tests": [{"type": "call", "args": [1]}]}, "fn_name None is not a Python identifier"),
    ({"inputs": [[1]], "outputs": [1], "fn_name": 3}, "'fn_name' 3 is not a Python identifier"),
    ({"tests": [{"type": "assert", "code": 5}]}, "tests[0] code is a int, not Python source text"),
    ({"asserts": "assert f(1) == 1"}, "'asserts' must be a list, got str"),
    ({"asserts": [None]}, "asserts[0] is a NoneType"),
    ({"tests": [{"type": "magic"}]}, "unknown test type 'magic'"),
])
def test_parse_test_spec_is_strict(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_test_spec(json.dumps(spec))
    assert score_code("```python\nprint(1)\n```", json.dumps(spec)).reason == "bad_gold"


def test_parse_test_spec_reads_deep_or_broken_text_as_value_errors():
    for text, message in [(deep(5000), "nested too deep"), ("{not json", "not JSON text"), ("[1]", "a JSON list")]:
        with pytest.raises(ValueError, match=message):
            parse_test_spec(text)


def test_the_legitimate_shapes_still_parse_and_round_trip():
    apps_single_arg = parse_test_spec(json.dumps({"inputs": [5, "ab", [1, 2]], "outputs": [25, 1, 3], "fn_name": "f"}))
    assert [t.args for t, _ in apps_single_arg] == [[5], ["ab"], [1, 2]]
    lines = parse_test_spec(json.dumps({"inputs": [["1", "2"]], "outputs": [["3"]]}))
    assert (lines[0][0].stdin, lines[0][1]) == ("1\n2\n", "3\n")
    mixed = json.dumps({"inputs": ["1\n"], "outputs": ["1\n"], "asserts": ["assert g(1) == 2"],
                        "tests": [{"type": "call", "fn_name": "g", "args": [[1, {"k": [2]}]], "expected": [2]},
                                  {"type": "stdio"}]})
    pairs = parse_test_spec(mixed)
    assert [t.kind for t, _ in pairs] == ["stdio", "assert", "call", "stdio"]
    assert parse_test_spec(spec_text(pairs)) == pairs


def test_limits_follow_the_config_and_the_buffer_message_limit():
    cfg = RewardConfig()
    assert SpecLimits.of(cfg) == SpecLimits(64, 16 << 20, 32 << 20, 32 << 20)
    assert SpecLimits.of(cfg, max_message_bytes=64 << 10).max_spec_bytes == 32 << 10     # half a message
    with pytest.raises(ValidationError, match="exceeds half of code_tmpfs_mb"):
        RewardConfig(code_tmpfs_mb=16)                     # a 16 MiB input would fill the sandbox's tmpfs
    assert RewardConfig(code_tmpfs_mb=16, code_max_test_bytes=8 << 20).code_max_test_bytes == 8 << 20
    # all kept inputs together within half the tmpfs (the sandbox writes them there)
    many = json.dumps(stdio_tests(3, 3000))
    tight = SpecLimits(max_tests=64, max_test_bytes=4096, max_input_bytes=8000, max_spec_bytes=1 << 20)
    with pytest.raises(ValueError, match="inputs total 9000 bytes, over half the sandbox's tmpfs"):
        bound_spec(many, tight)
    unbounded = bound_spec(many, None)                       # validation only: the spec as it is
    assert (unbounded.answer, unbounded.cut) == (many, 0)
