"""Code reward: extract the program, AST-check it, run the tests in the sandbox, judge outside it.

Test spec (the prompt's `answer`, a JSON object), any of:
  {"inputs": [...], "outputs": [...]}                   stdin/stdout tests (APPS/TACO/PRIME style);
  {"inputs": [[args...]], "outputs": [...], "fn_name": "f"}  call tests (an APPS call-based output
                                                        may be wrapped in a one-element list);
  {"asserts": ["assert f(1) == 2", ...]}                assert tests, run after the program;
  {"tests": [{"type": "stdio", "input": s, "output": s} | {"type": "call", "fn_name": f, "args": [...],
             "expected": v} | {"type": "assert", "code": s}, ...]}.
Expected outputs stay in this process: the sandbox sees only inputs, so a program cannot read the
answers out of its own memory. stdout is compared line by line after stripping trailing whitespace,
then token by token; return values are compared as JSON data (tuples as lists). Integers compare
exactly: an expected integer token needs an integer token of the same value (`1e9` or `1000000000.0`
does not answer 1000000000), an expected int needs an equal int or float. Only where the expected
value is a float is a 1e-6 relative/absolute tolerance allowed (a relative tolerance on integers
would accept 999999999 for 10**9).

Reward: fraction of tests passed, or 1/0 with code_all_or_nothing (failure -1 with signed_reward).
Reason: correct when all pass; otherwise the first failure's kind (timeout, memory, runtime_error,
wrong), or no_code / syntax_error / bad_gold (unusable spec) / sandbox_error before any test ran.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from rewards.config import RewardConfig
from rewards.extract import extract_code
from rewards.result import (
    BAD_GOLD,
    CORRECT,
    MEMORY,
    NO_CODE,
    RUNTIME_ERROR,
    SANDBOX_ERROR,
    SYNTAX_ERROR,
    TIMEOUT,
    WRONG,
    RewardResult,
)
from rewards.sandbox import CodeTest, SandboxLimits, SandboxResult, check_syntax, run_tests

_SPEC_KEYS = ("inputs", "tests", "asserts")
_JSON_OBJECT_START = re.compile(r"\s*\{")
EXTRACTED_CHARS = 2000  # RewardResult.extracted keeps the program's head: it travels in every group message


def may_be_test_spec(answer: str) -> bool:
    """The check without parsing: the answer starts as a JSON object does (a spec always does)."""
    return _JSON_OBJECT_START.match(answer) is not None


def is_test_spec(answer: str) -> bool:
    """Cheap routing check: a JSON object with one of the known keys."""
    if not may_be_test_spec(answer):
        return False
    try:
        spec = json.loads(answer)
    except ValueError:
        return False
    return isinstance(spec, dict) and any(k in spec for k in _SPEC_KEYS)


def parse_test_spec(answer: str) -> list[tuple[CodeTest, Any]]:
    """(test, expected) pairs; expected is stdout text, a return value, or None for asserts. Raises ValueError."""
    spec = json.loads(answer)
    if not isinstance(spec, dict):
        raise ValueError("test spec is not a JSON object")
    pairs: list[tuple[CodeTest, Any]] = []
    if "inputs" in spec:
        inputs, outputs = spec["inputs"], spec.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError("'inputs' and 'outputs' must be lists of equal length")
        fn = spec.get("fn_name")
        for x, y in zip(inputs, outputs):
            if fn:
                pairs.append((CodeTest("call", fn_name=fn, args=x if isinstance(x, list) else [x]), y))
            else:
                pairs.append((CodeTest("stdio", stdin=_text(x)), _text(y)))
    for code in spec.get("asserts", []):
        pairs.append((CodeTest("assert", code=str(code)), None))
    for t in spec.get("tests", []):
        kind = t.get("type")
        if kind == "stdio":
            pairs.append((CodeTest("stdio", stdin=_text(t.get("input", ""))), _text(t.get("output", ""))))
        elif kind == "call":
            pairs.append((CodeTest("call", fn_name=t["fn_name"], args=list(t.get("args", []))), t.get("expected")))
        elif kind == "assert":
            pairs.append((CodeTest("assert", code=str(t["code"])), None))
        else:
            raise ValueError(f"unknown test type {kind!r}")
    if not pairs:
        raise ValueError("test spec has no tests")
    return pairs


def _text(x) -> str:
    return "\n".join(map(str, x)) + "\n" if isinstance(x, list) else str(x)


_INTEGER = re.compile(r"[+-]?[0-9]+")


def stdout_matches(actual: str, expected: str) -> bool:
    a = [line.rstrip() for line in actual.strip().splitlines()]
    e = [line.rstrip() for line in expected.strip().splitlines()]
    if a == e:
        return True
    ta, te = actual.split(), expected.split()
    return len(ta) == len(te) and all(_token_matches(x, y) for x, y in zip(ta, te))


def _token_matches(actual: str, expected: str) -> bool:
    if actual == expected:
        return True
    if _INTEGER.fullmatch(expected):  # an integer answer: the same integer, printed as one
        return _INTEGER.fullmatch(actual) is not None and _canonical(actual) == _canonical(expected)
    return _close(actual, expected)


def _canonical(integer: str) -> str:
    """Sign and leading zeros normalised ("+007" -> "7", "-0" -> "0"), kept as text: no int() digit limit."""
    digits = integer.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if integer.startswith("-") and digits != "0" else digits


def value_matches(actual: Any, expected: Any) -> bool:
    if _json_eq(actual, expected):
        return True
    # APPS call-based outputs are often wrapped: [[1, 2]] for a function returning [1, 2].
    return isinstance(expected, list) and len(expected) == 1 and _json_eq(actual, expected[0])


def _json_eq(a: Any, b: Any) -> bool:
    """`a` (the program's) against `b` (expected)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(b, int):  # an integer answer: exactly equal (Python's int/float comparison is exact)
        return isinstance(a, (int, float)) and a == b
    if isinstance(a, (int, float)) and isinstance(b, float):
        try:
            return a == b or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
        except OverflowError:  # an int beyond float range
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_eq(a[k], b[k]) for k in a)
    return a == b


def _close(x: str, y: str) -> bool:
    try:
        return math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-6)
    except (ValueError, OverflowError):
        return False


def judge(test: CodeTest, expected: Any, run: SandboxResult) -> str:
    """The test's outcome as a reason: correct, wrong, timeout, memory or runtime_error."""
    if run.timeout:
        return TIMEOUT
    if run.memory_exceeded:
        return MEMORY
    if not run.success:
        judged_wrong = "AssertionError" in run.error or "UnjudgeableComparison" in run.error
        return WRONG if test.kind == "assert" and judged_wrong else RUNTIME_ERROR
    if test.kind == "stdio":
        return CORRECT if not run.output_truncated and stdout_matches(run.stdout, expected) else WRONG
    if test.kind == "call":
        return CORRECT if run.has_value and value_matches(run.value, expected) else WRONG
    return CORRECT


def limits_from(cfg: RewardConfig) -> SandboxLimits:
    return SandboxLimits(timeout_s=cfg.code_test_timeout_s, memory_mb=cfg.code_memory_mb,
                         max_output_bytes=cfg.max_output_bytes, max_procs=cfg.code_max_procs,
                         tmpfs_mb=cfg.code_tmpfs_mb, namespaces=cfg.code_use_namespaces,
                         hidden_paths=cfg.code_hidden_paths, cpus=cfg.code_cpus,
                         # all or nothing: one timeout decides the reward
                         max_timeouts=1 if cfg.code_all_or_nothing else cfg.code_max_timeouts,
                         total_s=cfg.code_response_timeout_s)


def score_code(text: str, answer: str, cfg: RewardConfig | None = None) -> RewardResult:
    cfg = cfg or RewardConfig()
    fail = cfg.failure_reward
    try:
        pairs = parse_test_spec(answer)[: cfg.code_max_tests]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return RewardResult(0.0, BAD_GOLD, None, f"unusable test spec: {e}"[:300])
    code = extract_code(text, cfg.think_end_tag, cfg.think_start_tag)
    if code is None or not code.strip():
        return RewardResult(fail, NO_CODE, None, "no ```python code block in the answer section")
    if len(code) > cfg.code_max_chars:
        return RewardResult(fail, SYNTAX_ERROR, None, f"program longer than {cfg.code_max_chars} characters")
    shown = code if len(code) <= EXTRACTED_CHARS else code[:EXTRACTED_CHARS] + "\n# ... (truncated)"
    if (err := check_syntax(code)) is not None:
        return RewardResult(fail, SYNTAX_ERROR, shown, err)
    runs = run_tests(code, [t for t, _ in pairs], limits_from(cfg))
    if all(r.error.startswith("sandbox ") and not r.timeout for r in runs):  # launcher/setup failure
        return RewardResult(fail, SANDBOX_ERROR, shown, runs[0].error[:300])
    outcomes = [judge(t, exp, r) for (t, exp), r in zip(pairs, runs, strict=True)]
    passed = sum(o == CORRECT for o in outcomes)
    if passed == len(outcomes):
        return RewardResult(1.0, CORRECT, shown, f"{passed}/{len(outcomes)} tests passed")
    first = next(i for i, o in enumerate(outcomes) if o != CORRECT)
    frac = passed / len(outcomes)
    if cfg.code_all_or_nothing or passed == 0:
        reward = fail
    else:
        reward = 2 * frac - 1 if cfg.signed_reward else frac
    detail = f"{passed}/{len(outcomes)} tests passed; test {first}: {outcomes[first]}"
    if runs[first].error:
        detail += f" ({runs[first].error[:200]})"
    return RewardResult(reward, outcomes[first], shown, detail)


def score_code_group(texts: Sequence[str], answer: str, cfg: RewardConfig | None = None) -> list[RewardResult]:
    """Sequential on purpose: parallelism comes from running many RewardWorkers (one sandbox each)."""
    return [score_code(t, answer, cfg) for t in texts]
