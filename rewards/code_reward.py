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
wrong), or no_code / syntax_error / bad_gold (unusable spec) / sandbox_error (a launcher that died) before
any test ran. The sandbox unable to run anything raises SandboxUnavailable: the group is dead-lettered, not
trained on (rewards.result). A group's responses share code_group_timeout_s (score_code_group).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
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
    SandboxUnavailable,
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
    """(test, expected) pairs; expected is stdout text, a return value, or None for asserts.

    The one reader of the spec format, at load (``rewards.problems``, ``rewards.verl_format``) and at
    scoring, so a spec the load accepts is one the sandbox runs as written. Strict: a stdin/stdout test's
    input and output are text or a list of text lines, a call test's ``fn_name`` an identifier and its
    ``args`` a list (in the ``inputs`` form a non-list input is the one argument, as APPS writes it), an
    assert's code text. Anything else raises ValueError naming the test."""
    spec = _json_spec(answer)
    pairs = _inputs_pairs(spec) if "inputs" in spec else []
    for i, code in enumerate(_spec_list(spec, "asserts")):
        pairs.append((CodeTest("assert", code=_code_text(code, f"asserts[{i}]")), None))
    for i, t in enumerate(_spec_list(spec, "tests")):
        pairs.append(_native_pair(t, f"tests[{i}]"))
    if not pairs:
        raise ValueError("test spec has no tests")
    return pairs


def spec_text(pairs: Sequence[tuple[CodeTest, Any]]) -> str:
    """The ``{"tests": [...]}`` JSON of ``pairs``: ``parse_test_spec`` reads it back to the same pairs."""
    tests = []
    for test, expected in pairs:
        if test.kind == "stdio":
            tests.append({"type": "stdio", "input": test.stdin, "output": expected})
        elif test.kind == "call":
            tests.append({"type": "call", "fn_name": test.fn_name, "args": test.args, "expected": expected})
        else:
            tests.append({"type": "assert", "code": test.code})
    return json.dumps({"tests": tests})


def _json_spec(answer: str) -> dict:
    try:
        spec = json.loads(answer)
    except RecursionError:            # the C decoder's guard: a ValueError like any unreadable spec
        raise ValueError("test spec is nested too deep to read") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"test spec is not JSON text ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"test spec is a JSON {type(spec).__name__}, not an object")
    return spec


def _spec_list(spec: dict, key: str) -> list:
    value = spec.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"'{key}' must be a list, got {type(value).__name__}")
    return value


def _inputs_pairs(spec: dict) -> list[tuple[CodeTest, Any]]:
    inputs, outputs = spec["inputs"], spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("'inputs' and 'outputs' must be lists of equal length")
    fn = spec.get("fn_name")
    if fn is None or fn == "":
        return [(CodeTest("stdio", stdin=_text(x, f"inputs[{i}]")), _text(y, f"outputs[{i}]"))
                for i, (x, y) in enumerate(zip(inputs, outputs))]
    fn = _identifier(fn, "'fn_name'")
    return [(CodeTest("call", fn_name=fn, args=x if isinstance(x, list) else [x]), y) for x, y in zip(inputs, outputs)]


def _native_pair(t: Any, where: str) -> tuple[CodeTest, Any]:
    if not isinstance(t, dict):
        raise ValueError(f"{where} is a {type(t).__name__}, not a test object")
    kind = t.get("type")
    if kind == "stdio":
        return CodeTest("stdio", stdin=_text(t.get("input", ""), f"{where} input")), _text(t.get("output", ""),
                                                                                          f"{where} output")
    if kind == "call":
        args = t.get("args", [])
        if not isinstance(args, list):      # a string would become one argument per character
            raise ValueError(f"{where} args must be a list of arguments, got {type(args).__name__}")
        return CodeTest("call", fn_name=_identifier(t.get("fn_name"), f"{where} fn_name"), args=args), t.get("expected")
    if kind == "assert":
        return CodeTest("assert", code=_code_text(t.get("code"), f"{where} code")), None
    raise ValueError(f"{where} has unknown test type {kind!r}")


def _identifier(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{what} {repr(name)[:80]} is not a Python identifier")
    return name


def _code_text(code: Any, what: str) -> str:
    if not isinstance(code, str):
        raise ValueError(f"{what} is a {type(code).__name__}, not Python source text")
    return code


def _text(x: Any, what: str) -> str:
    """A stdin/stdout test's input or output: text, or a list of lines (joined, newline-terminated)."""
    if isinstance(x, str):
        return x
    if isinstance(x, list) and all(isinstance(line, str) for line in x):
        return "\n".join(x) + "\n"
    raise ValueError(f"{what} is a {type(x).__name__}: a stdin/stdout test's input and output are text or a "
                     "list of text lines")


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


def score_code(text: str, answer: str, cfg: RewardConfig | None = None, *,
               limits: SandboxLimits | None = None) -> RewardResult:
    """``limits``: the sandbox's (default ``limits_from(cfg)``; score_code_group narrows them to its budget).
    Raises SandboxUnavailable when the sandbox could not run the program at all."""
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
    runs = _run_sandboxed(code, [t for t, _ in pairs], limits or limits_from(cfg))
    # What the program may have caused (a launcher it killed without namespaces, a failure during a test)
    # is a failure like any other: dead-lettering it would let a program escape its reward by breaking in.
    if all(r.error.startswith("sandbox ") and not r.timeout for r in runs):
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


SETUP_FAILED = "sandbox setup failed"     # runner.py's error when init failed before any program ran


def _run_sandboxed(code: str, tests: list[CodeTest], limits: SandboxLimits) -> list[SandboxResult]:
    """run_tests, with the sandbox's own failures, before any program ran, raised as SandboxUnavailable."""
    try:
        runs = run_tests(code, tests, limits)
    except OSError as exc:   # the launcher could not be started (no fork, no file descriptor, no temp dir)
        raise SandboxUnavailable(f"sandbox launcher could not start: {type(exc).__name__}: {exc}"[:300]) from exc
    if all(r.error.startswith(SETUP_FAILED) for r in runs):
        raise SandboxUnavailable(runs[0].error[:300])
    return runs


# Once a group's code_group_timeout_s is spent, each response left still runs, with this much wall clock for
# all its tests (a correct program needs well under a second here; the math path's twin is 0.25 s an answer).
LATE_RESPONSE_S = 2.0


def score_code_group(texts: Sequence[str], answer: str, cfg: RewardConfig | None = None) -> list[RewardResult]:
    """Sequential on purpose: parallelism comes from running many RewardWorkers (one sandbox each).

    The responses share code_group_timeout_s: each one's sandbox gets at most what is left, and once it is
    spent LATE_RESPONSE_S, so a group holds its worker for at most the budget plus a few seconds a response.
    A response cut short that way is a timeout like any other (a failure reward), never a dropped group:
    a policy whose programs sleep until the budget runs out must get the reward of slow programs, not
    escape it through a dead-letter."""
    cfg = cfg or RewardConfig()
    base = limits_from(cfg)
    deadline = time.monotonic() + cfg.code_group_timeout_s
    return [score_code(text, answer, cfg, limits=within(base, max(deadline - time.monotonic(), LATE_RESPONSE_S)))
            for text in texts]


def within(limits: SandboxLimits, seconds: float) -> SandboxLimits:
    """``limits`` with no test and no response's tests together allowed more than ``seconds``."""
    total = seconds if limits.total_s is None else min(limits.total_s, seconds)
    return dataclasses.replace(limits, timeout_s=min(limits.timeout_s, seconds), total_s=total)


