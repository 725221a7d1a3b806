"""Math reward, table-driven: each case states the response, the gold, the expected reward and reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rewards.config import RewardConfig
from rewards.math_reward import score_math, score_math_group
from rewards.math_verifier import MathVerifier

# The verifier's budget is not what these tests check, except in the timeout rows, which keep a tight
# one (TIGHT): 10 s holds on a busy 2-core machine, where a 1 s budget timed out ordinary answers.
CFG = RewardConfig(math_timeout_s=10.0, math_kill_grace_s=1.0)
SIGNED = RewardConfig(math_timeout_s=10.0, math_kill_grace_s=1.0, signed_reward=True)
TIGHT = RewardConfig(math_timeout_s=1.0, math_kill_grace_s=1.0)
MB_FILLER = "Let me think about this step by step. " * 27_000          # ~1 MB
assert len(MB_FILLER) > 1_000_000

# (id, response, gold, reward, reason)
CASES = [
    # fractions and decimals
    ("frac-vs-frac12", r"The answer is \boxed{\frac{1}{2}}.", r"\frac12", 1.0, "correct"),
    ("decimal-vs-frac", r"\boxed{0.5}", r"\frac{1}{2}", 1.0, "correct"),
    ("frac-vs-decimal", r"\boxed{1/2}", "0.5", 1.0, "correct"),
    ("dfrac", r"\boxed{\dfrac{3}{4}}", "0.75", 1.0, "correct"),
    ("tfrac", r"\boxed{\tfrac{3}{4}}", r"\frac{3}{4}", 1.0, "correct"),
    ("negative-frac", r"\boxed{-\frac{1}{2}}", "-0.5", 1.0, "correct"),
    ("wrong-frac", r"\boxed{\frac{1}{3}}", r"\frac{1}{2}", 0.0, "wrong"),
    ("int-vs-float", r"\boxed{2}", "2.0", 1.0, "correct"),
    # units / text around the answer
    ("units-text", r"So the length is \boxed{10\text{ cm}}.", "10", 1.0, "correct"),
    ("text-apples", r"\boxed{7 \text{ apples}}", "7", 1.0, "correct"),
    ("degrees", r"\boxed{5^\circ}", "5", 1.0, "correct"),
    ("dollars", r"\boxed{\$5}", "5", 1.0, "correct"),
    ("textbf", r"\boxed{\textbf{7}}", "7", 1.0, "correct"),
    ("spaces-inside", r"Answer: \boxed{ 204 }", "204", 1.0, "correct"),
    ("assignment", r"\boxed{x=5}", "5", 1.0, "correct"),
    # multiple boxes: the last wins
    ("last-box-wins", r"First \boxed{5}, corrected: \boxed{6}", "6", 1.0, "correct"),
    ("earlier-box-ignored", r"First \boxed{6}, corrected: \boxed{5}", "6", 0.0, "wrong"),
    ("box-in-box", r"\boxed{\boxed{8}}", "8", 1.0, "correct"),
    # several boxes (issue 19): the final group of boxes, joined by "and"/"or", commas or spacing, is one answer
    ("boxes-and", r"The roots are \boxed{-2} and \boxed{1}.", "-2, 1", 1.0, "correct"),
    ("boxes-and-after-think", r"<think>\boxed{3}</think> so \boxed{-2} and \boxed{1}", "-2, 1", 1.0, "correct"),
    ("boxes-commas", r"\boxed{1}, \boxed{2}, \boxed{3}", r"\{1,2,3\}", 1.0, "correct"),
    ("boxes-adjacent", r"$\boxed{1}\boxed{2}$", "1,2", 1.0, "correct"),
    ("boxes-quad-text-and", r"\[ \boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)} \]", "(2, 2), (6, 2)", 1.0,
     "correct"),
    ("boxes-assignments", r"$x = \boxed{3}$, $y = \boxed{4}$", "3, 4", 1.0, "correct"),
    ("boxes-repeated", r"\boxed{7} and \boxed{7}", "7", 1.0, "correct"),
    ("boxes-or-is-a-set-not-a-hedge", r"\boxed{5} or \boxed{6}", "5", 0.0, "wrong"),
    ("boxes-joined-is-not-a-part", r"\boxed{-2} and \boxed{1}", "-2", 0.0, "wrong"),
    ("boxes-far-apart", r"First \boxed{-2}. After more work the set is \boxed{1}", "-2, 1", 0.0, "wrong"),
    ("boxes-in-unclosed-think", r"<think>\boxed{-2} and \boxed{1}", "-2, 1", 0.0, "no_box"),
    # nested braces
    ("nested-sqrt-frac", r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{\sqrt2}{2}", 1.0, "correct"),
    ("nested-2sqrt3", r"$\boxed{2\sqrt{3}}$", r"\sqrt{12}", 1.0, "correct"),
    ("polynomial", r"\boxed{x^2+2x+1}", "(x+1)^2", 1.0, "correct"),
    ("pmatrix", r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}", 1.0, "correct"),
    # box variants
    ("fbox", r"\fbox{12}", "12", 1.0, "correct"),
    ("boxed-space", r"The answer is $\boxed 7$", "7", 1.0, "correct"),
    # no box / malformed
    ("no-box", "The answer is 5.", "5", 0.0, "no_box"),
    ("unclosed-box", r"\boxed{\frac{1}{2}", "1/2", 0.0, "no_box"),
    ("empty-box", r"\boxed{}", "1", 0.0, "parse_error"),
    ("malformed-parens", r"\boxed{)(}", "1", 0.0, "parse_error"),
    ("malformed-frac", r"\boxed{\frac{}{}}", "1", 0.0, "parse_error"),
    ("malformed-sqrt", r"\boxed{\sqrt{}}", "1", 0.0, "parse_error"),
    ("too-long-box", "\\boxed{" + "1" * 5000 + "}", "1", 0.0, "parse_error"),
    ("division-by-zero", r"\boxed{\frac{1}{0}}", "1", 0.0, "wrong"),
    # reasoning section
    ("after-think", r"<think>maybe \boxed{5}</think> so \boxed{7}", "7", 1.0, "correct"),
    ("think-box-ignored", r"<think>maybe \boxed{5}</think> so \boxed{7}", "5", 0.0, "wrong"),
    ("box-only-in-think", r"<think>it is \boxed{5}</think> The answer is 5.", "5", 0.0, "no_box"),
    ("unterminated-think", r"<think>it is \boxed{5} and I keep going", "5", 0.0, "no_box"),
    ("think-end-only", r"reasoning \boxed{4}</think>\boxed{5}", "5", 1.0, "correct"),
    # signs, commas, percent, leading zeros
    ("negative", r"\boxed{-3}", "-3", 1.0, "correct"),
    ("sign-wrong", r"\boxed{-3}", "3", 0.0, "wrong"),
    ("thousands-comma", r"\boxed{1,000}", "1000", 1.0, "correct"),
    ("thousands-brace-comma", r"\boxed{1{,}000}", "1000", 1.0, "correct"),
    ("percent-vs-int", r"\boxed{50\%}", "50", 1.0, "correct"),
    ("percent-vs-fraction", r"\boxed{12\%}", "0.12", 1.0, "correct"),
    ("aime-leading-zero", r"\boxed{033}", "33", 1.0, "correct"),
    # sets, intervals, tuples, constants
    ("interval", r"\boxed{[1,2)}", "[1,2)", 1.0, "correct"),
    ("interval-open-closed-wrong", r"\boxed{(1,2]}", "[1,2)", 0.0, "wrong"),
    ("interval-infinity", r"\boxed{\left( -\infty, 2 \right]}", r"(-\infty,2]", 1.0, "correct"),
    ("set-order", r"\boxed{\{1,2\}}", r"\{2,1\}", 1.0, "correct"),
    ("bare-list-vs-set", r"\boxed{2, 3}", r"\{2,3\}", 1.0, "correct"),
    ("pi", r"\boxed{\pi}", r"\pi", 1.0, "correct"),
    ("pi-approx-wrong", r"\boxed{3.14}", r"\pi", 0.0, "wrong"),
    # verifier limits and bad golds
    ("tower-timeout", r"\boxed{10^{10^{10}}}", "3", 0.0, "timeout"),
    ("gold-bare-latex-prefix", r"\boxed{7}", r"7\sqrt{2}", 0.0, "wrong"),
    ("gold-bare-latex", r"\boxed{\sqrt{98}}", r"7\sqrt{2}", 1.0, "correct"),
    ("gold-delimited", r"\boxed{0.5}", r"$\frac{1}{2}$", 1.0, "correct"),
    ("gold-full-solution", r"\boxed{5}", r"so the answer is $\boxed{5}$.", 1.0, "correct"),
    ("gold-degrees", r"\boxed{336}", r"336^\circ", 1.0, "correct"),
    ("gold-empty", r"\boxed{1}", "", 0.0, "bad_gold"),
    ("gold-garbage", r"\boxed{1}", "}{", 0.0, "bad_gold"),
    # very long outputs (1 MB)
    ("1mb-then-box", MB_FILLER + r"\boxed{42}", "42", 1.0, "correct"),
    ("1mb-no-box", MB_FILLER, "42", 0.0, "no_box"),
    ("1mb-think-then-box", "<think>" + MB_FILLER + r"\boxed{1}</think>\boxed{42}", "42", 1.0, "correct"),
    ("1mb-unclosed-box", r"\boxed{" + MB_FILLER, "42", 0.0, "parse_error"),
]
assert len(CASES) >= 40


# Upstream math-verify's own cases with several boxes (tests/unit/data: source commit, orientation, notes).
UPSTREAM = json.loads((Path(__file__).parent / "data" / "math_verify_several_boxes.json").read_text())["cases"]


def _started(cfg: RewardConfig):
    v = MathVerifier(CFG.math_timeout_s, cfg.math_kill_grace_s)
    v.start()
    v.verify_many(r"\frac{1}{2}", ["0.5"])  # math-verify's lazy imports, under the roomy budget
    v.timeout_s = cfg.math_timeout_s
    yield v
    v.close()


@pytest.fixture(scope="module")
def verifier():
    yield from _started(CFG)


@pytest.fixture(scope="module")
def tight_verifier():
    yield from _started(TIGHT)


@pytest.mark.parametrize("response,gold,reward,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_math_reward_table(request, response, gold, reward, reason):
    cfg = TIGHT if reason == "timeout" else CFG
    v = request.getfixturevalue("tight_verifier" if cfg is TIGHT else "verifier")
    start = time.perf_counter()
    result = score_math(response, gold, cfg, v)
    elapsed = time.perf_counter() - start
    assert (result.reward, result.reason) == (reward, reason), result
    assert elapsed < cfg.math_timeout_s + cfg.math_kill_grace_s + 0.5, f"took {elapsed:.2f}s"


@pytest.mark.parametrize("case", UPSTREAM, ids=[c["id"] for c in UPSTREAM])
def test_upstream_several_boxes(verifier, case):
    result = score_math(case["response"], case["gold"], CFG, verifier)
    assert (result.reward, result.reason) == (case["reward"], case["reason"]), (case["note"], result)


def test_signed_reward(verifier):
    texts = [r"\boxed{4}", r"\boxed{5}", "no box", r"\boxed{)(}"]
    assert [r.reward for r in score_math_group(texts, "4", SIGNED, verifier)] == [1.0, -1.0, -1.0, -1.0]
    assert [r.reward for r in score_math_group(texts, "", SIGNED, verifier)] == [0.0] * 4  # bad gold


def test_group_keeps_order_and_dedupes(verifier):
    texts = [r"\boxed{3}", "nothing", r"\boxed{3}", r"\boxed{2}", r"\boxed{3}"]
    results = score_math_group(texts, "3", CFG, verifier)
    assert [r.reason for r in results] == ["correct", "no_box", "correct", "wrong", "correct"]
    assert [r.extracted for r in results] == ["3", None, "3", "2", "3"]


def test_bad_gold_is_reported_even_without_boxes(verifier):
    results = score_math_group(["no box", "none either"], "}{", CFG, verifier)
    assert [r.reason for r in results] == ["bad_gold", "bad_gold"]


def test_one_mb_output_is_fast(verifier):
    score_math(r"\boxed{1}", "1", CFG, verifier)  # warm
    start = time.perf_counter()
    results = score_math_group([MB_FILLER + r"\boxed{42}"] * 8, "42", CFG, verifier)
    assert all(r.correct for r in results)
    assert time.perf_counter() - start < 1.0
