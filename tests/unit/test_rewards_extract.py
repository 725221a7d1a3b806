"""Extraction helpers: answer section, last box, last code block; all linear on adversarial input."""

from __future__ import annotations

import time

import pytest

from rewards.extract import MAX_JOINED_BOXES, answer_section, extract_code, final_boxes, last_boxed


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


@pytest.mark.parametrize("text,content", [
    (r"\boxed{-2} and \boxed{1}", "-2,1"),
    (r"\boxed{1}\boxed{2}", "1,2"),
    (r"\boxed{1}, \boxed{2}; \boxed{3}", "1,2,3"),
    (r"\(\boxed{1}\) and \(\boxed{-2}\).", "1,-2"),
    (r"\boxed{(3, 3)} \text{ for part (a) and } \boxed{(1, 1)}", "(3, 3),(1, 1)"),
    (r"$x = \boxed{3}$, $y_{2} = \boxed{4}$", "3,4"),
    (r"\boxed{7} and \boxed{7}", "7"),                           # repeats collapse
    (r"\boxed{a} or \boxed 5", "a,5"),
    (r"First \boxed{5}, corrected: \boxed{6}", "6"),             # a revised answer stands alone
    (r"\boxed{5} and hence the final answer is \boxed{6}", "6"),  # more than a conjunction between them
    (r"\boxed{1} no no no no no \boxed{2}", "2"),
    (r"\boxed{1} and " + "x" * 80 + r" \boxed{2}", "2"),        # too far apart
    (r"\boxed{\boxed{8}}", "8"),                                  # an enclosing box is not a neighbour
    (r"\boxed{\frac{\boxed{1}}{2}} and \boxed{3}", "3"),             # nor is a box nested in an earlier one
    (r"\boxed{1 and \boxed{2}", "2"),                             # nor is an unclosed one
    (r"\boxed{1} and \boxed{2", None),                            # the last box decides: unclosed, no answer
    ("no box", None),
])
def test_final_boxes(text, content):
    assert final_boxes(text).content == content


def test_final_boxes_caps_the_group():
    box = final_boxes(r"\boxed{1} and " * 40 + r"\boxed{2}")
    assert box.content == "1,2"  # repeats of 1 collapse to one
    many = " and ".join(rf"\boxed{{{i}}}" for i in range(40))
    assert final_boxes(many).content.split(",") == [str(i) for i in range(40 - MAX_JOINED_BOXES, 40)]
    assert final_boxes(r"\boxed{12345} and \boxed{67890}", max_chars=10).too_long


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


ADVERSARIAL = {  # name: the input at scale n (n = 200_000: about a megabyte)
    "unclosed-fences": lambda n: "```python\n" * n,
    "unclosed-boxes": lambda n: "\\boxed{" * n,
    "braces-before-the-box": lambda n: "{" * (5 * n) + "\\boxed{1}",
    "box-then-whitespace": lambda n: "\\boxed" + " " * (5 * n),
    "joinable-boxes": lambda n: "\\boxed{1} and " * n,
    "joinable-boxes-at-the-length-cap": lambda n: ("\\boxed{" + "{" * 4000 + "}" * 4000 + "} and ") * (n // 2000),
}


def _best_of_3(text: str) -> float:
    """CPU seconds of this process (not wall clock: a busy machine stretches that, and unevenly)."""
    times = []
    for _ in range(3):
        start = time.process_time()
        extract_code(text)
        last_boxed(text)
        final_boxes(text)
        times.append(time.process_time() - start)
    return min(times)


@pytest.mark.parametrize("make", list(ADVERSARIAL.values()), ids=list(ADVERSARIAL))
def test_adversarial_inputs_are_linear(make):
    """Four times the input costs about four times as much (quadratic: sixteen; measured 1.8-6x here).
    A ratio of best-of-3 CPU times, not a wall-clock bound: it holds on a loaded machine, and a
    quadratic pass over a megabyte would not finish the small run in the first place."""
    small, large = _best_of_3(make(200_000)), _best_of_3(make(800_000))
    assert large < 10 * small + 0.05, f"{small:.4f} CPU s at 1x, {large:.4f} CPU s at 4x"
