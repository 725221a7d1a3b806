"""Extraction helpers: answer section, last box, last code block; all linear on adversarial input."""

from __future__ import annotations

import time

import pytest

from rewards.extract import answer_section, extract_code, last_boxed


@pytest.mark.parametrize("text,content,too_long", [
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}", False),
    (r"a \boxed{1} b \boxed{\{1,2\}}", r"\{1,2\}", False),       # escaped braces do not count
    (r"\boxed {  7 }", "  7 ", False),
    (r"$\boxed 5$", "5", False),
    (r"\fbox{3} then \boxed{4}", "4", False),
    (r"\boxed{4} then \fbox{3}", "3", False),
    (r"\boxed{\frac{1}{2}", None, False),                       # unclosed last box: no answer
    (r"\boxed", None, False),
    ("no box", None, False),
    ("\\boxed{" + "9" * 50 + "}", None, True),
])
def test_last_boxed(text, content, too_long):
    box = last_boxed(text, max_chars=20)
    assert (box.content, box.too_long) == (content, too_long)


def test_answer_section():
    assert answer_section("<think>a</think>b</think>c") == "c"
    assert answer_section("<think>never closed") is None
    assert answer_section("plain") == "plain"


@pytest.mark.parametrize("text,code", [
    ("```python\nx = 1\n```", "x = 1\n"),
    ("```python\nx = 1\n``` and ```\ny = 2\n```", "y = 2\n"),
    ("```python\nx = 1\n``` and ```cpp\nint y;\n```", "x = 1\n"),
    ("```python\nx = 1\n``` then ```python\nunclosed", "x = 1\n"),
    ("<think>```python\nx = 1\n```</think>no code", None),
    ("no code at all", None),
])
def test_extract_code(text, code):
    assert extract_code(text) == code


@pytest.mark.parametrize("text", [
    "```python\n" * 200_000,                       # many unclosed fences
    "\\boxed{" * 200_000,                          # many unclosed boxes
    "{" * 1_000_000 + "\\boxed{1}",                # braces before the box
    "\\boxed" + " " * 1_000_000,                   # a box with a megabyte of whitespace
])
def test_adversarial_inputs_are_linear(text):
    start = time.perf_counter()
    extract_code(text)
    last_boxed(text)
    assert time.perf_counter() - start < 0.5
