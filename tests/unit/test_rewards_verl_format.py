"""Datasets in the verl layout (rewards.verl_format, rewards.problems.load_problems): the project's own
samples of each shape (tests/data/verl) load, render through a chat template with the system message
kept, and score with the real math-verify and the real sandbox; bad rows are rejected by row number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch.run.data import PromptRenderer
from rewards.code_reward import parse_test_spec
from rewards.config import RewardConfig
from rewards.problems import load_problem_set, load_problems
from rewards.scoring import resolve_kind, score_group
from rewards.verl_format import RowRejected, code_spec, math_answer

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "verl"
CFG = RewardConfig(code_test_timeout_s=2.0, code_memory_mb=256)


def block(code: str) -> str:
    return f"<think>short</think>Solution:\n```python\n{code}\n```"


# one right and one wrong program per sample problem, in file order
SOLUTIONS = {
    "code_stdio.jsonl": [("a, b = map(int, input().split())\nprint(a + b)", "print(7)"),
                         ("n = int(input())\nprint(n * n)", "print(int(input()) * 2)"),
                         ("print(input()[::-1])", "print(input())")],
    "code_call.jsonl": [("def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"),
                        ("def double(xs):\n    return [2 * x for x in xs]", "def double(xs):\n    return xs"),
                        ("def max_of(a, b):\n    return max(a, b)", "def max_of(a, b):\n    return min(a, b)")],
    "code_assert.jsonl": [("def is_even(n):\n    return n % 2 == 0", "def is_even(n):\n    return True"),
                          ("def square(n):\n    return n * n", "def square(n):\n    return 2 * n")],
}
MATH_GOLD = ["25", "27", "\\frac{3}{4}", "6"]


@pytest.fixture(scope="module")
def chat_tokenizer():
    """A byte-level BPE tokenizer with a chat template that shows roles (no download, no world)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["system user assistant"], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    fast.chat_template = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}[assistant] {% endif %}")
    return fast


def test_math_samples_load_render_and_score(chat_tokenizer):
    loaded = load_problem_set(SAMPLES / "math.jsonl")
    assert loaded.format == "verl" and not loaded.rejected and loaded.indices == [0, 1, 2, 3]
    assert [p.answer for p in loaded.problems] == MATH_GOLD
    assert [p.id for p in loaded.problems] == [f"math-{i}" for i in range(4)]       # extra_info.index
    skywork = loaded.problems[1]
    assert skywork.data_source == "sample-math-skywork" and skywork.messages[0][0] == "system"
    assert skywork.problem == "Compute 3^3. Put your final answer within \\boxed{}."
    text = PromptRenderer(chat_tokenizer).text(skywork)
    assert text == ("[system] You are a careful solver. Think, then answer.\n"
                    "[user] Compute 3^3. Put your final answer within \\boxed{}.\n[assistant] ")
    plain = PromptRenderer(chat_tokenizer, chat_template=False, template="Q: {problem}\nA: ").text(skywork)
    assert plain == "Q: You are a careful solver. Think, then answer.\n\nCompute 3^3. Put your final answer within " \
                    "\\boxed{}.\nA: "
    for p in loaded.problems:
        assert resolve_kind(p.answer, p.data_source, cfg=CFG) == "math"
        right, wrong = score_group([f"So \\boxed{{{p.answer}}}", "So \\boxed{1000}"], p.answer, p.data_source, CFG)
        assert (right.reward, right.reason, wrong.reward) == (1.0, "correct", 0.0), (p, right, wrong)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_code_samples_load_render_and_score_in_the_sandbox(name, chat_tokenizer):
    loaded = load_problem_set(SAMPLES / name)
    assert loaded.format == "verl" and not loaded.rejected and len(loaded.problems) == len(SOLUTIONS[name])
    renderer = PromptRenderer(chat_tokenizer)
    for p, (right, wrong) in zip(loaded.problems, SOLUTIONS[name]):
        assert renderer.text(p).endswith("\n[assistant] ") and renderer.ids(p)
        assert resolve_kind(p.answer, p.data_source, cfg=CFG) == "code"
        good, bad = score_group([block(right), block(wrong)], p.answer, p.data_source, CFG)
        assert (good.reward, good.reason) == (1.0, "correct"), (p.id, good)
        assert bad.reward < 1.0 and bad.reason == "wrong", (p.id, bad)


def test_code_shapes_map_onto_the_sandbox_test_kinds():
    kinds = lambda spec: [(t.kind, t.fn_name) for t, _ in parse_test_spec(spec)]   # noqa: E731
    assert kinds(code_spec({"inputs": ["1\n"], "outputs": ["1\n"]})) == [("stdio", "")]
    assert kinds(code_spec('{"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"}')) == [("call", "add")]
    functional = code_spec([{"input": "1\n2", "output": "3", "testtype": "functional"}], {"fn_name": "f"})
    assert kinds(functional) == [("call", "f")] and parse_test_spec(functional)[0][0].args == [1, 2]
    assert kinds(code_spec(["assert f(1) == 1"])) == [("assert", "")]
    assert kinds(code_spec("assert f(1) == 1")) == [("assert", "")]
    assert kinds(code_spec({"inputs": [["1", "2"]], "outputs": [["3"]]})) == [("stdio", "")]   # lines
    assert parse_test_spec(code_spec({"inputs": [["1", "2"]], "outputs": [["3"]]}))[0][0].stdin == "1\n2\n"


@pytest.mark.parametrize("gt,reason", [
    ([{"type": "file", "input": "a", "output": "b"}], "type 'file'"),
    (["assert f(1) == = 2"], "does not parse"),
    ({"fn_name": "not valid", "inputs": [[1]], "outputs": [1]}, "not a Python identifier"),
    ({"inputs": ["1\n", "2\n"], "outputs": ["1\n"]}, "same length"),
    ([{"type": "function_call", "input": [1], "output": 1}], "without fn_name"),
    ({"inputs": [{"a": 1}], "outputs": ["1"]}, "not text"),
    ({"cases": []}, "none of tests/asserts"),
    ("print(1)", "neither JSON nor assert"),
    ([], "no tests"),
])
def test_code_ground_truth_the_sandbox_cannot_run_is_rejected(gt, reason):
    with pytest.raises(RowRejected, match=reason):
        code_spec(gt)


def test_math_answer_forms():
    assert math_answer('["27"]') == "27" and math_answer("[1, 2]") == "[1, 2]" and math_answer(6) == "6"
    with pytest.raises(RowRejected, match="empty list"):
        math_answer([])


def test_bad_rows_are_rejected_with_row_numbers(capsys):
    loaded = load_problem_set(SAMPLES / "bad_rows.jsonl")
    assert [p.id for p in loaded.problems] == ["bad_rows-0"] and loaded.indices == [0]
    assert [(r.row, r.reason.split(":")[0].split(" (")[0]) for r in loaded.rejected] == [
        (2, "the prompt has no user message"), (3, "reward_model.ground_truth is missing or empty"),
        (4, "test 0 has type 'file'; the sandbox runs stdin/stdout, function-call and assert tests"),
        (5, "assert 0 does not parse"), (6, "function name 'not valid' is not a Python identifier"),
        (7, "'inputs' and 'outputs' must be lists of the same length"), (8, "no reward_model object")]
    with pytest.raises(ValueError, match=r"bad_rows.jsonl: 7 row\(s\) rejected \(row 2: the prompt has no user "
                                         r"message; row 3: .*--data.bad_rows skip"):
        load_problems(SAMPLES / "bad_rows.jsonl")
    logged = []
    assert len(load_problems(SAMPLES / "bad_rows.jsonl", bad_rows="skip", log=logged.append)) == 1
    assert logged and "7 row(s) rejected" in logged[0] and "row 8: no reward_model object" in logged[0]


def test_parquet_and_forced_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (SAMPLES / "code_stdio.jsonl").read_text().splitlines()]
    for r in rows:            # parquet needs one type per column: ground truth as JSON text, as the sets ship it
        gt = r["reward_model"]["ground_truth"]
        r["reward_model"]["ground_truth"] = gt if isinstance(gt, str) else json.dumps(gt)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "code.parquet")
    from_parquet = load_problems(tmp_path / "code.parquet")
    assert [p.answer for p in from_parquet] == [p.answer for p in load_problems(SAMPLES / "code_stdio.jsonl")]
    assert from_parquet[0].messages[0] == ("system", "Write a Python program in a ```python code block.")
    with pytest.raises(ValueError, match="missing field"):          # verl rows read as flat rows
        load_problems(SAMPLES / "math.jsonl", format="flat")
    flat = tmp_path / "flat.jsonl"
    flat.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    assert load_problems(flat)[0].messages is None
    loaded = load_problem_set(flat, format="verl")
    assert not loaded.problems and "no reward_model object" in loaded.rejected[0].reason
