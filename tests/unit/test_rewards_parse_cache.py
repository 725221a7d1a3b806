"""The verifier child's ParseCache: math-verify's parse of a string is kept and reused, within bounds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rewards.math_verifier import MathVerifier

# the verifier child is a script (run by path, `python -I`), not a module of the package: loaded as one
SERVER = Path(__file__).parents[2] / "rewards" / "_math_verify_server.py"
SPEC = importlib.util.spec_from_file_location("math_verify_server", SERVER)
server = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(server)
ParseCache = server.ParseCache


class CountingParse:
    """Stands in for math-verify's parse: records each call; ``slow`` texts raise (a timeout)."""

    def __init__(self, slow: tuple[str, ...] = ()):
        self.calls: list[str] = []
        self.slow = slow

    def __call__(self, text: str, parsing_timeout=None) -> list:
        assert parsing_timeout is None       # our SIGALRM budget replaces math-verify's own
        self.calls.append(text)
        if text in self.slow:
            raise TimeoutError(text)
        return [len(text), text]


def test_a_string_is_parsed_once_and_each_caller_gets_its_own_list():
    parse = CountingParse()
    cache = ParseCache(parse)
    first = cache(r"\boxed{12}")
    first.append("caller's own")
    assert cache(r"\boxed{12}") == [10, r"\boxed{12}"]
    assert parse.calls == [r"\boxed{12}"]
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_parse_that_fails_is_not_kept():
    parse = CountingParse(slow=("slow",))
    cache = ParseCache(parse)
    for _ in range(2):
        with pytest.raises(TimeoutError):
            cache("slow")
    assert parse.calls == ["slow", "slow"]       # its budget again each time, no remembered failure


def test_long_strings_are_parsed_each_time_and_the_least_recent_is_evicted():
    parse = CountingParse()
    cache = ParseCache(parse, entries=2, max_chars=8)
    cache("x" * 9), cache("x" * 9)
    assert parse.calls == ["x" * 9] * 2
    cache("a"), cache("b"), cache("a"), cache("c")     # "b" is the least recently used when "c" comes
    parse.calls.clear()
    cache("a"), cache("c"), cache("b")
    assert parse.calls == ["b"]


def test_verdicts_with_the_cache_are_math_verifys_on_repeated_answers():
    """Through the real child: the same answers against other golds, again and again, keep their verdicts
    (a kept parse must not carry one gold's comparison into the next)."""
    verifier = MathVerifier(timeout_s=5.0)
    try:
        cases = [("12", ["12", "12.0", r"\frac{24}{2}", "13", "x"]),
                 (r"\frac{1}{2}", ["0.5", "12", r"\frac12", "1/2"]),
                 ("13", ["12", "13", r"\frac{24}{2}"])]
        want = [["correct", "correct", "correct", "wrong", "wrong"],
                ["correct", "wrong", "correct", "correct"],
                ["wrong", "correct", "wrong"]]
        for _ in range(3):
            got = [[v for v, _ in verifier.verify_many(gold, preds)[2]] for gold, preds in cases]
            assert got == want
    finally:
        verifier.close()


class FakeSize:
    """This process's address-space size as the test sets it."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self) -> int:
        return self.size


def test_nothing_is_kept_while_the_process_has_grown_past_its_budget():
    size = FakeSize(100 << 20)
    parse = CountingParse()
    cache = ParseCache(parse, grow_bytes=64 << 20, vm_bytes=size)
    cache("a"), cache("b")
    size.size = (100 + 65) << 20               # e.g. a policy boxed huge numbers
    cache("c")                                 # not kept, and what was is dropped
    size.size = (100 + 10) << 20
    parse.calls.clear()
    cache("a"), cache("c"), cache("a")
    assert parse.calls == ["a", "c"] and cache.dropped == 1


def test_the_budget_is_at_most_a_quarter_of_what_the_memory_limit_leaves():
    size = FakeSize(100 << 20)
    cache = ParseCache(CountingParse(), grow_bytes=256 << 20, limit_bytes=180 << 20, vm_bytes=size)
    size.size = (100 + 21) << 20               # over (180 - 100) / 4 = 20 MiB
    cache("a")
    assert cache("a") and cache.hits == 0
    unknown = ParseCache(CountingParse(), vm_bytes=lambda: None)
    unknown("a"), unknown("a")
    assert unknown.hits == 0                   # its size unknown: nothing kept


@pytest.mark.slow
def test_a_policy_boxing_huge_numbers_cannot_fill_the_verifier_with_kept_parses():
    """Through the real child (~15 s): 200 distinct boxes of a 2 MB integer each. Kept without the
    memory budget, they exhausted the 768 MiB limit and the last ones got parse_error (MemoryError)."""
    verifier = MathVerifier(timeout_s=5.0, memory_mb=768)
    try:
        for batch in range(4):
            preds = [f"2^{{2^{{24}}}}+{batch * 50 + k}" for k in range(50)]
            ok, _, verdicts = verifier.verify_many("3", preds)
            assert ok and {v for v, _ in verdicts} == {"wrong"}, (batch, verdicts)
        assert verifier.verify_many("3", ["3"])[2] == [("correct", "")]
        assert verifier.restarts == 0
    finally:
        verifier.close()
