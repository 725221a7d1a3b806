"""Size limits of code test specs, applied when a dataset loads (``rewards.problems``).

A spec is the Problem's answer: it travels in every prompt and group message through Redis, and the
sandbox writes each test's input into its private tmpfs. Scoring can only refuse a bad spec over and
over (``bad_gold``, every time the prompt comes round); the load can refuse it once, by row number,
and ``--data.bad_rows skip`` trains on the others. Tests beyond ``code_max_tests`` would never run:
the load cuts them rather than refusing the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rewards.code_reward import is_test_spec, parse_test_spec, spec_text
from rewards.config import RewardConfig
from rewards.sandbox import CodeTest

MAX_NESTING = 100   # lists/objects in a call test's value: deeper ones would overflow recursive code at scoring


class SpecTooLarge(ValueError):
    """A spec the sandbox could read but the limits refuse; the message names the limit."""


@dataclass(frozen=True)
class SpecLimits:
    max_tests: int          # more are cut
    max_test_bytes: int     # one test's input + expected output
    max_input_bytes: int    # all kept tests' inputs together: half the sandbox's tmpfs
    max_spec_bytes: int     # the spec's JSON after the cut

    @classmethod
    def of(cls, cfg: RewardConfig, max_message_bytes: int | None = None) -> SpecLimits:
        """``cfg``'s limits; ``max_message_bytes`` (``BufferConfig``): a spec also stays within half of it,
        the group message carrying it beside its responses."""
        spec = cfg.code_max_spec_bytes if max_message_bytes is None else min(cfg.code_max_spec_bytes,
                                                                             max_message_bytes // 2)
        return cls(cfg.code_max_tests, cfg.code_max_test_bytes, (cfg.code_tmpfs_mb << 20) // 2, spec)


@dataclass(frozen=True)
class BoundedSpec:
    answer: str     # the spec to train on: the input text, or its first max_tests tests as {"tests": [...]}
    cut: int        # tests dropped


def bound_spec(answer: str, limits: SpecLimits | None) -> BoundedSpec:
    """``answer`` checked by ``parse_test_spec`` (ValueError) and, with ``limits``, cut to ``max_tests`` and
    held to the byte limits (SpecTooLarge)."""
    pairs = parse_test_spec(answer)
    if limits is None:
        return BoundedSpec(answer, 0)
    cut = max(0, len(pairs) - limits.max_tests)
    if cut:
        pairs = pairs[:limits.max_tests]
        answer = spec_text(pairs)
    inputs = 0
    for i, (test, expected) in enumerate(pairs):
        _check_nesting(test, expected, i)
        size = bytes_of_test(test, expected)
        if size > limits.max_test_bytes:
            raise SpecTooLarge(f"test {i} has {_mib(size)} of input + expected output, over code_max_test_bytes "
                               f"({_mib(limits.max_test_bytes)}): the sandbox writes its input into its tmpfs")
        inputs += utf8_len(test.stdin)
    if inputs > limits.max_input_bytes:
        raise SpecTooLarge(f"the tests' inputs total {_mib(inputs)}, over half the sandbox's tmpfs "
                           f"({_mib(limits.max_input_bytes)}, code_tmpfs_mb)")
    if (size := utf8_len(answer)) > limits.max_spec_bytes:
        raise SpecTooLarge(f"the test spec is {_mib(size)}, over {_mib(limits.max_spec_bytes)} (code_max_spec_bytes, "
                           "or half of buffer.max_message_bytes when smaller): it travels in every prompt and "
                           "group message")
    return BoundedSpec(answer, cut)


def is_spec_object(answer: str) -> bool:
    """Whether a flat row's answer is a JSON test spec (what ``rewards.scoring`` routes to the sandbox);
    a spec too deeply nested to read counts as one, so the load refuses it with its reason."""
    try:
        return is_test_spec(answer)
    except RecursionError:      # JSON nested too deep to decode
        return True


def bytes_of_test(test: CodeTest, expected: Any) -> int:
    """What one test carries: its input (stdin, or a call's arguments as JSON, or an assert) and its expected output."""
    if test.kind == "stdio":
        return utf8_len(test.stdin) + utf8_len(expected)
    if test.kind == "call":
        return len(json.dumps(test.args)) + len(json.dumps(expected))
    return utf8_len(test.code)


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _check_nesting(test: CodeTest, expected: Any, index: int) -> None:
    """Without recursion (the value may be deeper than the interpreter's stack allows)."""
    if test.kind != "call":
        return
    stack = [(v, 1) for v in (test.args, expected) if isinstance(v, (list, dict))]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"test {index}'s arguments or expected value nest deeper than {MAX_NESTING} levels")
        for child in value.values() if isinstance(value, dict) else value:
            if isinstance(child, (list, dict)):
                stack.append((child, depth + 1))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"
