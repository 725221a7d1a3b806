"""Code reward: test-spec formats, output comparison, reward modes, reward-hacking attempts, routing."""

from __future__ import annotations

import json
import time

import pytest

import rewards.code_reward as code_reward
from rewards.code_reward import (
    is_test_spec,
    parse_test_spec,
    score_code,
    score_code_group,
    stdout_matches,
    value_matches,
)
from rewards.config import RewardConfig
from rewards.result import SandboxUnavailable, ScoreRequest
from rewards.sandbox.runner import CodeTest, SandboxLimits, SandboxResult, run_tests
from rewards.scoring import resolve_kind, score_group, score_requests

CFG = RewardConfig(code_test_timeout_s=1.0, code_memory_mb=256)
ADD_STDIO = json.dumps({"inputs": ["1 2\n", "3 4\n", "10 -5\n"], "outputs": ["3\n", "7\n", "5\n"]})
ADD_CALL = json.dumps({"inputs": [[1, 2], [3, 4]], "outputs": [3, [7]], "fn_name": "add"})
SQUARE_ASSERTS = json.dumps({"asserts": ["assert f(2) == 4", "assert f(3) == 9"]})


def block(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


@pytest.mark.parametrize("text,spec,reward,reason", [
    (block("a, b = map(int, input().split())\nprint(a + b)"), ADD_STDIO, 1.0, "correct"),
    (block("import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)"), ADD_STDIO, 1.0, "correct"),
    (block("print(open(0).read().split()[0] and 3)"), ADD_STDIO, 1 / 3, "wrong"),
    (block("def add(a, b):\n    return a + b"), ADD_CALL, 1.0, "correct"),
    (block("class Solution:\n    def add(self, a, b):\n        return a + b"), ADD_CALL, 1.0, "correct"),
    (block("def f(x):\n    return x * x"), SQUARE_ASSERTS, 1.0, "correct"),
    (block("def f(x):\n    return 4"), SQUARE_ASSERTS, 0.5, "wrong"),
    (block("def f(x):\n    while True: pass"), SQUARE_ASSERTS, 0.0, "timeout"),
    (block("def f(x):\n    return 1 / 0"), SQUARE_ASSERTS, 0.0, "runtime_error"),
    (block("def f(x):\n    return bytearray(10 ** 10)"), SQUARE_ASSERTS, 0.0, "memory"),
    ("no code at all", SQUARE_ASSERTS, 0.0, "no_code"),
    (block("def f(x) return x"), SQUARE_ASSERTS, 0.0, "syntax_error"),
    ("<think>```python\ndef f(x):\n    return x * x\n```</think> I give up.", SQUARE_ASSERTS, 0.0, "no_code"),
    ("<think>draft</think>" + block("def f(x):\n    return x * x"), SQUARE_ASSERTS, 1.0, "correct"),
    (block("print(1)"), '{"inputs": [1, 2], "outputs": [1]}', 0.0, "bad_gold"),
    (block("print(1)"), '{"tests": [{"type": "magic"}]}', 0.0, "bad_gold"),
], ids=["stdio", "stdio-buffer", "stdio-partial", "call", "call-leetcode-class", "assert", "assert-partial",
        "timeout", "runtime-error", "memory", "no-code", "syntax-error", "code-only-in-think", "code-after-think",
        "spec-length-mismatch", "spec-unknown-type"])
def test_code_reward_table(text, spec, reward, reason):
    r = score_code(text, spec, CFG)
    assert (pytest.approx(r.reward), r.reason) == (reward, reason), r


@pytest.mark.parametrize("code,spec", [
    ("class T:\n    def __eq__(self, o): return True\ndef add(a, b): return T()", ADD_CALL),
    ("class T:\n    def __eq__(self, o): return True\ndef f(x): return T()", SQUARE_ASSERTS),
    ("class I(int):\n    def __eq__(self, o): return True\ndef f(x): return I(0)", SQUARE_ASSERTS),
    ("import sys\nsys.exit(0)", SQUARE_ASSERTS),
    ("import os\nos._exit(0)", SQUARE_ASSERTS),
    ("import os\nos.write(3, b'{\"status\": \"ok\"}')\nos._exit(0)", SQUARE_ASSERTS),
    ("import sys\nprint('3')\nprint('7')\nprint('5')\nsys.exit(0)", ADD_STDIO),
], ids=["eq-object-call", "eq-object-assert", "int-subclass-eq", "sys-exit", "os-exit", "forged-record", "print-all"])
def test_reward_hacks_do_not_pass(code, spec):
    r = score_code(block(code), spec, CFG)
    assert r.reason != "correct" and r.reward < 1.0, r


def test_reward_modes():
    half = block("def f(x):\n    return 4")
    assert score_code(half, SQUARE_ASSERTS, CFG.model_copy(update={"code_all_or_nothing": True})).reward == 0.0
    assert score_code(half, SQUARE_ASSERTS, CFG.model_copy(update={"signed_reward": True})).reward == 0.0  # 2*0.5-1
    assert score_code("nothing", SQUARE_ASSERTS, CFG.model_copy(update={"signed_reward": True})).reward == -1.0


def test_spec_formats():
    explicit = json.dumps({"tests": [{"type": "stdio", "input": "1\n", "output": "1\n"},
                                     {"type": "call", "fn_name": "g", "args": [1], "expected": 2},
                                     {"type": "assert", "code": "assert g(1) == 2"}]})
    kinds = [t.kind for t, _ in parse_test_spec(explicit)]
    assert kinds == ["stdio", "call", "assert"]
    code = block("def g(x):\n    return x + 1\nif __name__ == '__main__':\n    print(input())")
    assert score_code(code, explicit, CFG).reason == "correct"
    assert is_test_spec(ADD_STDIO) and is_test_spec(SQUARE_ASSERTS) and not is_test_spec("42")
    assert not is_test_spec('{"a": 1}') and not is_test_spec("{not json")


@pytest.mark.parametrize("actual,expected,ok", [
    ("3\n", "3", True), ("3  \n\n", "3\n", True), ("1 2\n3", "1 2 3", True), ("0.3333333", "0.33333333", True),
    ("3\n", "4\n", False), ("", "0", False), ("YES", "yes", False),
])
def test_stdout_matches(actual, expected, ok):
    assert stdout_matches(actual, expected) is ok


@pytest.mark.parametrize("actual,expected,ok", [
    ([1, 2], [1, 2], True), ([1, 2], [[1, 2]], True), (0.1 + 0.2, 0.3, True), (True, 1, False),
    ({"a": [1]}, {"a": [1]}, True), ("1", 1, False), (None, None, True), ([1], [2], False),
])
def test_value_matches(actual, expected, ok):
    assert value_matches(actual, expected) is ok


# Integers compare exactly: a relative tolerance made 999999999 pass for 10**9 and 10**18 + 12345 for
# 10**18. The 1e-6 tolerance applies only where the expected answer is a float; an integer answer must
# be given as that integer (printed as an integer token; returned as an int or an equal float).
@pytest.mark.parametrize("actual,expected,ok", [
    ("999999999", "1000000000", False), ("1e9", "999999999", False), ("1e9", "1000000000", False),
    ("1000000000.0", "1000000000", False), ("1000000000000012345", "1000000000000000000", False),
    ("1" * 40, "1" * 39 + "2", False), ("5 999999999", "5 1000000000", False), ("\u0663", "3", False),
    ("1000000000", "1000000000", True), ("-0", "0", True), ("+7 007", "7 7", True), ("1" * 5000, "1" * 5000, True),
    ("3", "3.0", True), ("1000000001", "1000000000.0", True), ("0.1000001", "0.1", True), ("0.2", "0.1", False),
])
def test_stdout_integers_compare_exactly(actual, expected, ok):
    assert stdout_matches(actual, expected) is ok


@pytest.mark.parametrize("actual,expected,ok", [
    (10 ** 9, 999999999, False), (999999999, 10 ** 9, False), (10 ** 18 + 12345, 10 ** 18, False),
    (1e18, 10 ** 18 + 12345, False), (999999999.9999, 10 ** 9, False), ([10 ** 9], [999999999], False),
    ({"a": 10 ** 18}, {"a": 10 ** 18 + 1}, False), (10 ** 400, 1.5, False),
    (10 ** 30, 10 ** 30, True), (4.0, 4, True), (1e18, 10 ** 18, True), (2, 2.0, True), (1e9 + 1, 1e9, True),
    ([[10 ** 9]], [[10 ** 9]], True),
])
def test_value_integers_compare_exactly(actual, expected, ok):
    assert value_matches(actual, expected) is ok


def test_routing():
    cfg = RewardConfig()
    assert resolve_kind("42") == "math"
    assert resolve_kind(ADD_STDIO) == "code"
    assert resolve_kind("42", data_source="livecodebench_v5", cfg=cfg) == "code"
    assert resolve_kind(ADD_STDIO, kind="math") == "math"
    with pytest.raises(ValueError):
        resolve_kind("1", kind="chess")  # type: ignore[arg-type]
    results = score_group([block("def f(x):\n    return x * x"), "nope"], SQUARE_ASSERTS, "mbpp", CFG)
    assert [r.reason for r in results] == ["correct", "no_code"]


def test_many_groups_in_one_call_a_failing_group_fails_alone():
    """What a reward worker returns for the groups an actor scored together: a group whose scoring
    raises gets its exception in its place; the groups before and after it are scored."""
    from rewards.result import ScoreRequest

    square = ScoreRequest([block("def f(x):\n    return x * x")], SQUARE_ASSERTS, "mbpp")
    out = score_requests([square, ScoreRequest(["1"], "1", kind="chess"), ScoreRequest(["nope"], SQUARE_ASSERTS)], CFG)
    assert [r.reason for r in out[0]] == ["correct"] and [r.reason for r in out[2]] == ["no_code"]
    assert isinstance(out[1], ValueError) and "chess" in str(out[1])


def test_all_or_nothing_runs_no_test_after_a_timeout_fraction_runs_them_until_its_cap():
    # hangs on input 1 only: the fraction reward still runs (and passes) the other two tests; the all-or-nothing
    # reward is 0 at the first timeout, so the two tests after it are not run (each would cost the timeout
    # again for a program that hangs on every input) and count as timed out
    hang_on_1 = block("a, b = map(int, input().split())\nwhile a == 1: pass\nprint(a + b)")
    spec = json.dumps({"inputs": ["1 2\n", "3 4\n", "10 -5\n"], "outputs": ["3\n", "7\n", "5\n"]})
    frac = score_code(hang_on_1, spec, CFG)
    assert frac.reward == pytest.approx(2 / 3) and frac.reason == "timeout", frac
    strict = score_code(hang_on_1, spec, CFG.model_copy(update={"code_all_or_nothing": True}))
    assert strict.reward == 0.0 and strict.reason == "timeout", strict
    assert "0/3 tests passed; test 0: timeout" in strict.detail, strict
    runs = run_tests("while True: pass", [CodeTest("stdio", stdin="1\n")] * 4,
                     SandboxLimits(timeout_s=0.5, max_timeouts=1))
    assert runs[0].timeout and "not run" not in runs[0].error
    assert all(r.timeout and r.error == "not run: 1 test(s) timed out, the last test 0 (max_timeouts)"
               for r in runs[1:]), runs
    # the fraction reward's cap (code_max_timeouts): a program that sleeps in every test costs two timeouts,
    # not one per test (64 x 4 s a response at the defaults)
    sleeper = block("import time\ntime.sleep(60)")
    spec = json.dumps({"inputs": ["1\n"] * 6, "outputs": ["1\n"] * 6})
    capped = score_code(sleeper, spec, CFG.model_copy(update={"code_test_timeout_s": 0.5}))
    assert capped.reward == 0.0 and capped.reason == "timeout", capped
    runs = run_tests("import time\ntime.sleep(60)", [CodeTest("stdio")] * 6, SandboxLimits(timeout_s=0.5, max_timeouts=2))
    assert [r.error.startswith("not run: 2 test(s) timed out") for r in runs] == [False] * 2 + [True] * 4, runs


def test_a_program_ending_each_test_just_inside_its_limit_is_stopped_by_the_response_budget():
    # sleeps 0.4 s of a 0.5 s limit, so no test times out and max_timeouts never binds; the response's 1 s
    # (total_s) stops the test running when it is spent and leaves the rest unrun, counted as timed out
    # (whatever the machine's load: a slower test only means fewer of them run)
    sleeper = "import time\ntime.sleep(0.4)\nprint(input())"
    runs = run_tests(sleeper, [CodeTest("stdio", stdin="7\n")] * 8, SandboxLimits(timeout_s=0.5, max_timeouts=2, total_s=1.0))
    ran = [r for r in runs if not r.error.startswith("not run")]
    assert 1 <= len(ran) <= 3 and len(runs) == 8, runs
    assert all(r.success and r.stdout == "7\n" for r in ran[:-1]), ran
    assert ran[-1].timeout or ran[-1].success, ran[-1]
    assert all(r.timeout and "(total_s) by the end of test" in r.error for r in runs[len(ran):]), runs
    # through the reward: the tests it passed in time count, the rest are timeouts
    spec = json.dumps({"inputs": ["7\n"] * 8, "outputs": ["7\n"] * 8})
    cfg = CFG.model_copy(update={"code_test_timeout_s": 0.5, "code_response_timeout_s": 1.0})
    out = score_code(block(sleeper), spec, cfg)
    assert out.reason == "timeout" and out.reward <= 2 / 8, out
    # without the budget every test runs (and passes): the hole it closes
    assert all(r.success for r in run_tests(sleeper, [CodeTest("stdio", stdin="7\n")] * 3,
                                            SandboxLimits(timeout_s=0.5, max_timeouts=2)))


def test_a_code_group_shares_its_budget_and_scores_what_it_cut_short_as_timeouts(monkeypatch):
    """code_group_timeout_s: each response's sandbox gets at most what the group has left (its total_s and per-test
    limit shrink), and once it is spent each response left still runs with LATE_RESPONSE_S. 2.5 s sleepers, 3 s a
    response, 4 s a group: the second response gets what is left (< 3 s), the third and fourth only the late timer.
    They are timeouts, a failure reward, not a dead-lettered group: a policy whose programs sleep until the budget
    runs out must not escape its reward (the group is judged in ~budget + a few seconds, whatever the load)."""
    seen = []

    def spy(code, tests, limits):
        seen.append(limits)
        return run_tests(code, tests, limits)

    monkeypatch.setattr(code_reward, "run_tests", spy)
    cfg = CFG.model_copy(update={"code_test_timeout_s": 3.0, "code_response_timeout_s": 3.0, "code_group_timeout_s": 4.0})
    sleeper = block("import time\ntime.sleep(2.5)\nprint(input())")
    spec = json.dumps({"inputs": ["7\n"], "outputs": ["7\n"]})
    start = time.monotonic()
    results = score_code_group([sleeper] * 4, spec, cfg)
    assert time.monotonic() - start < 4.0 + 4 * (code_reward.LATE_RESPONSE_S + 2.0)
    assert seen[0].total_s == 3.0 and seen[0].timeout_s == 3.0
    assert seen[1].total_s < 3.0 and seen[-1].total_s == code_reward.LATE_RESPONSE_S, seen
    assert all(lim.timeout_s <= lim.total_s for lim in seen), seen
    assert results[-1].reason == "timeout" and results[-1].reward == cfg.failure_reward, results
    # a quick program left after the budget still passes within the late timer
    assert score_code_group([sleeper, sleeper, block("print(input())")], spec,
                            cfg.model_copy(update={"code_group_timeout_s": 0.5}))[-1].reason == "correct"
    # a group that fits its budget is scored as before, every response with the full limits
    seen.clear()
    quick = block("print(input())")
    assert [r.reason for r in score_code_group([quick] * 2, spec, cfg)] == ["correct", "correct"]
    assert [lim.total_s for lim in seen] == [3.0, 3.0]


def _failed_runs(error: str, n: int = 2):
    return [SandboxResult(False, "", "", error=error)] * n


def test_a_sandbox_that_cannot_run_anything_raises_but_a_broken_launcher_stays_a_failure(monkeypatch):
    """SandboxUnavailable (the group is dead-lettered) only for failures before any program ran: the launcher
    not started, init's setup failed. A launcher the program may have killed, or a failure during a test, is
    scored as a failure: otherwise breaking the sandbox would escape the negative reward."""
    program = block("def f(x):\n    return x * x")
    monkeypatch.setattr(code_reward, "run_tests", lambda *a: _failed_runs("sandbox setup failed: OSError: mount"))
    with pytest.raises(SandboxUnavailable, match="sandbox setup failed"):
        score_code(program, SQUARE_ASSERTS, CFG)

    def no_fork(*a):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(code_reward, "run_tests", no_fork)
    with pytest.raises(SandboxUnavailable, match="launcher could not start"):
        score_code(program, SQUARE_ASSERTS, CFG)
    # through score_requests: that group's exception in its place, the math group beside it scored
    out = score_requests([ScoreRequest([r"\boxed{4}"], "4", "math"), ScoreRequest([program], SQUARE_ASSERTS, "mbpp")], CFG)
    assert [r.reason for r in out[0]] == ["correct"]
    assert isinstance(out[1], SandboxUnavailable) and out[1].reason == "sandbox_unavailable"
    for error in ("sandbox launcher died (exit -9): ", "sandbox failed during test 0: ValueError: x"):
        monkeypatch.setattr(code_reward, "run_tests", lambda *a, error=error: _failed_runs(error))
        r = score_code(program, SQUARE_ASSERTS, CFG)
        assert (r.reward, r.reason) == (0.0, "sandbox_error"), r
