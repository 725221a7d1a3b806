"""Rows in the verl layout -> Problems: what DAPO-Math-17k, Skywork-OR1-RL-Data, DeepScaleR and
DeepCoder ship (JSONL or parquet).

    {"data_source": "...", "prompt": [{"role": "system", "content": ...}, {"role": "user", "content": ...}],
     "ability": "math" | "code", "reward_model": {"style": "rule", "ground_truth": ...}, "extra_info": {...}}

The chat messages are kept (``Problem.messages``; ``launch.run.data.PromptRenderer`` renders them with
the tokenizer's chat template, a system message included). ``data_source`` chooses the reward: a
source starting with one of ``RewardConfig.code_data_sources`` is code, and so is ``ability: code``;
anything else is math. The gold answer is ``reward_model.ground_truth``:

- math: the answer text (a number is written as text; a list of answers, or its JSON text, gives its first);
- code, in the shapes those sets use, mapped onto the sandbox's test kinds (``rewards.code_reward``'s
  ``{"tests": [...]}`` spec, JSON text, as the Problem's answer):
    ``{"inputs": [...], "outputs": [...]}``                       stdin/stdout pairs (TACO, APPS, Skywork);
    ``{"inputs": [[args]], "outputs": [...], "fn_name": "f"}``    function-call tests;
    ``[{"input": s, "output": s, "type": "stdin_stdout"}, ...]``  (``testtype: "stdin"`` too; DeepCoder);
    ``[{"input": ..., "output": ..., "type": "function_call", "fn_name": "f"}, ...]`` (``testtype:
        "functional"``: each input line one JSON argument, the output JSON; the name may sit in
        ``extra_info`` as ``fn_name`` / ``func_name``);
    ``["assert f(1) == 2", ...]`` or ``{"asserts" | "test_list": [...]}`` assert lists (MBPP style);
    ``{"tests": [...]}``                                            the sandbox's own spec, as is.
  Either the object itself or its JSON text.

A row that cannot become a problem the reward can score raises :class:`RowRejected` with the reason
(``rewards.problems`` adds the row number): no user message, no ground truth, a code shape the sandbox
has no test kind for, an assert that does not parse, a function name that is not an identifier, tests
over the size limits (``rewards.spec_limits``; tests beyond ``code_max_tests`` are cut, not refused), ...
"""

from __future__ import annotations

import json
from typing import Any

from rewards.sandbox import check_syntax
from rewards.spec_limits import BoundedSpec, SpecLimits, SpecTooLarge, bound_spec

ROLES = ("system", "user", "assistant")


class RowRejected(ValueError):
    """This row cannot be used; the message is the reason."""


def is_verl_row(row: dict[str, Any]) -> bool:
    """A chat-message ``prompt`` and a ``reward_model`` object: the verl layout's two marks."""
    prompt = row.get("prompt")
    return (isinstance(row.get("reward_model"), dict) and isinstance(prompt, (list, tuple))
            and all(isinstance(m, dict) for m in prompt))


def messages_of(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    prompt = row.get("prompt")
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise RowRejected("'prompt' is not a non-empty list of chat messages")
    out = []
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise RowRejected(f"prompt message {i} is not {{role: system|user|assistant, content: text}}: "
                              f"{str(m)[:120]}")
        out.append((m["role"], m["content"]))
    if not any(role == "user" for role, _ in out):
        raise RowRejected("the prompt has no user message")
    return tuple(out)


def is_code_row(row: dict[str, Any], code_sources: tuple[str, ...]) -> bool:
    source = str(row.get("data_source", "")).lower()
    return (any(source.startswith(prefix.lower()) for prefix in code_sources)
            or str(row.get("ability", "")).lower().startswith("code"))


def ground_truth_of(row: dict[str, Any]) -> Any:
    gt = row["reward_model"].get("ground_truth")
    if gt is None or (isinstance(gt, str) and not gt.strip()):
        raise RowRejected("reward_model.ground_truth is missing or empty")
    return gt


def math_answer(gt: Any) -> str:
    """The gold answer's text. A list (or the JSON text of a list of strings, as some sets store it)
    gives its first element; math-verify compares one gold answer."""
    if isinstance(gt, str) and gt.lstrip().startswith("["):
        try:
            parsed = json.loads(gt)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and parsed and all(isinstance(x, str) for x in parsed):
            gt = parsed       # '["27"]' is a list of answers; '[1, 2]' stays an interval
    if isinstance(gt, (list, tuple)):
        if not gt:
            raise RowRejected("reward_model.ground_truth is an empty list")
        gt = gt[0]
    if isinstance(gt, bool) or not isinstance(gt, (str, int, float)):
        raise RowRejected(f"math ground_truth must be text or a number, got {type(gt).__name__}")
    answer = str(gt).strip()
    if not answer:
        raise RowRejected("math ground_truth is empty")
    return answer


# ------------------------------------------------------------------------------------------- code
def code_spec(gt: Any, extra_info: dict[str, Any] | None = None) -> str:
    """The sandbox spec (JSON text of ``{"tests": [...]}``) for a code ground truth; RowRejected if the
    sandbox cannot run it."""
    return bounded_code_spec(gt, extra_info).answer


def bounded_code_spec(gt: Any, extra_info: dict[str, Any] | None = None,
                      limits: SpecLimits | None = None) -> BoundedSpec:
    """``code_spec``, cut to ``limits.max_tests`` and held to its byte limits (``rewards.spec_limits``);
    RowRejected with the reason otherwise."""
    try:
        spec = json.dumps({"tests": _tests(gt, extra_info)})
    except RecursionError:          # json's guard, or a repr in a message: the ground truth is too deep
        raise RowRejected("code ground_truth is nested too deep to read") from None
    try:
        return bound_spec(spec, limits)
    except SpecTooLarge as exc:
        raise RowRejected(str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise RowRejected(f"the sandbox cannot read the tests: {exc}") from None


def _tests(gt: Any, extra_info: dict[str, Any] | None) -> list[dict]:
    if isinstance(gt, str):
        try:
            gt = json.loads(gt)
        except ValueError:
            if "assert" not in gt:
                raise RowRejected("code ground_truth is text that is neither JSON nor assert statements") from None
            gt = [gt]
    fn_default = _fn_name((extra_info or {}).get("fn_name") or (extra_info or {}).get("func_name"))
    if isinstance(gt, dict):
        tests = _from_dict(gt, fn_default)
    elif isinstance(gt, (list, tuple)):
        tests = _from_list(list(gt), fn_default)
    else:
        raise RowRejected(f"code ground_truth is a {type(gt).__name__}, not tests")
    if not tests:
        raise RowRejected("code ground_truth has no tests")
    return tests


def _fn_name(name: Any) -> str | None:
    if name is None or name == "":
        return None
    if not isinstance(name, str) or not name.isidentifier():
        raise RowRejected(f"function name {name!r} is not a Python identifier")
    return name


def _from_dict(gt: dict[str, Any], fn_default: str | None) -> list[dict]:
    if "tests" in gt:                                    # already the sandbox's own spec
        if not isinstance(gt["tests"], list):
            raise RowRejected(f"'tests' is a {type(gt['tests']).__name__}, not a list of tests")
        return [_checked_native(t) for t in gt["tests"]]
    for key in ("asserts", "test_list", "assert"):
        if key in gt:
            return _asserts(gt[key])
    if "inputs" in gt:
        inputs, outputs = gt["inputs"], gt.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise RowRejected("'inputs' and 'outputs' must be lists of the same length")
        fn = _fn_name(gt.get("fn_name")) or fn_default
        return [_call(fn, x, y) if fn else _stdio(x, y) for x, y in zip(inputs, outputs)]
    raise RowRejected(f"code ground_truth object has none of tests/asserts/test_list/inputs: keys {sorted(gt)[:8]}")


def _from_list(gt: list, fn_default: str | None) -> list[dict]:
    if all(isinstance(t, str) for t in gt):
        return _asserts(gt)
    tests = []
    for i, t in enumerate(gt):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise RowRejected(f"test {i} is not an {{input, output}} object: {str(t)[:120]}")
        kind = str(t.get("type") or t.get("testtype") or "stdin_stdout").lower()
        if kind in ("stdin_stdout", "stdin", "stdio"):
            tests.append(_stdio(t["input"], t["output"]))
        elif kind in ("function_call", "functional", "call"):
            fn = _fn_name(t.get("fn_name") or t.get("func_name")) or fn_default
            if fn is None:
                raise RowRejected(f"test {i} is a function-call test without fn_name (nor one in extra_info)")
            tests.append(_call(fn, _functional_args(t["input"]), _functional_value(t["output"])))
        else:
            raise RowRejected(f"test {i} has type {kind!r}; the sandbox runs stdin/stdout, function-call "
                              f"and assert tests")
    return tests


def _text(x: Any, what: str) -> str:
    if isinstance(x, list) and all(isinstance(line, str) for line in x):
        return "\n".join(x) + "\n"
    if not isinstance(x, str):
        raise RowRejected(f"a stdin/stdout test's {what} is a {type(x).__name__}, not text")
    return x


def _stdio(x: Any, y: Any) -> dict:
    return {"type": "stdio", "input": _text(x, "input"), "output": _text(y, "output")}


def _call(fn: str, args: Any, expected: Any) -> dict:
    return {"type": "call", "fn_name": fn, "args": args if isinstance(args, list) else [args], "expected": expected}


def _functional_args(x: Any) -> list:
    """LiveCodeBench's functional input: one JSON value per line."""
    if not isinstance(x, str):
        return x if isinstance(x, list) else [x]
    try:
        return [json.loads(line) for line in x.splitlines() if line.strip()]
    except ValueError:
        raise RowRejected(f"function-call input is not one JSON value per line: {x[:80]!r}") from None


def _functional_value(y: Any) -> Any:
    if isinstance(y, str):
        try:
            return json.loads(y)
        except ValueError:
            return y
    return y


def _asserts(codes: Any) -> list[dict]:
    if isinstance(codes, str):
        codes = [codes]
    if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
        raise RowRejected("an assert list must be a list of Python statements")
    tests = []
    for i, code in enumerate(codes):
        if (err := check_syntax(code)) is not None:
            raise RowRejected(f"assert {i} does not parse: {err}")
        if "assert" not in code:
            raise RowRejected(f"assert {i} has no assert statement: {code[:80]!r}")
        tests.append({"type": "assert", "code": code})
    return tests


def _checked_native(t: Any) -> dict:
    if not isinstance(t, dict):
        raise RowRejected(f"a test is not an object: {str(t)[:120]}")
    if t.get("type") == "assert":
        _asserts([t.get("code")])
    if t.get("type") == "call":
        _fn_name(t.get("fn_name"))
    return t
