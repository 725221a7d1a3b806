"""Math reward under attack: hedges a policy could try, equal answers that must score 1, math-verify's known
limitations, slow answers in a group, and the shipped golds against themselves. Real math-verify throughout.

The hedge tables state the property, not one verdict: a response that names several values is credited
for at most one of them (math-verify reads `a = b`, `a \\to b`, `a \\\\ b` as one value), and a list, set,
interval, `\\pm` or several boxes never match a scalar gold that is one of their members.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from rewards.config import RewardConfig
from rewards.extract import final_boxes
from rewards.math_reward import score_math, score_math_group
from rewards.math_verifier import MAX_LATE_KILLS, MathVerifier

CFG = RewardConfig(math_timeout_s=10.0, math_kill_grace_s=1.0)  # roomy: a busy 2-core machine
TIGHT = RewardConfig(math_timeout_s=1.0, math_kill_grace_s=1.0)
CANDIDATES = ("18", "19", "20")
EVAL_DATA = Path(__file__).resolve().parents[2] / "rewards" / "eval_data"


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(CFG.math_timeout_s, CFG.math_kill_grace_s)
    v.start()
    yield v
    v.close()


# Responses that hedge between 18, 19 and 20: none of the three may be credited.
NEVER_CREDITED = [
    r"\boxed{18, 19, 20}",
    r"\boxed{19, 20}",
    r"\boxed{19 \text{ or } 20}",
    r"\boxed{19 or 20}",
    r"\boxed{\{18,19,20\}}",
    r"\boxed{x \in \{18,19\}}",
    r"\boxed{[0, 100]}",
    r"\boxed{(0,\infty)}",
    r"\boxed{(18, 20)}",
    r"\boxed{x \in \mathbb{R}}",
    r"\boxed{\mathbb{R}}",
    r"\boxed{19 \pm 1}",
    r"\boxed{19} or \boxed{20}",
    r"\boxed{19} \text{ or } \boxed{20}",
    r"\boxed{18}, \boxed{19}, \boxed{20}",
    r"\boxed{18}.\boxed{19}",
    r"$x = \boxed{18}$, $x = \boxed{19}$",
    r"\boxed{\boxed{18} \text{ or } \boxed{19}}",
    r"\boxed{x=18 \text{ or } x=19}",
    r"\boxed{x = 18 \text{ or } 19}",
    r"\boxed{18 \le x \le 20}",
    r"\boxed{x > 0}",
    r"\boxed{x \geq 19}",
    r"\boxed{19 \le 20}",
    r"\boxed{18$ or $19}",
    r"\boxed{\text{between } 18 \text{ and } 20}",
    r"\boxed{x}",
    r"\boxed{\infty}",
    r"\boxed{\frac{0}{0}}",
]
# Responses that name several values of which math-verify reads one: at most one gold may be credited.
AT_MOST_ONE = [
    r"\boxed{19 = 20}",
    r"\boxed{x = 18 = 19}",
    r"\boxed{18 \to 19}",
    r"\boxed{18 \Rightarrow 19}",
    r"\boxed{19 \approx 18}",
    r"\boxed{18 \equiv 19}",
    r"\boxed{18 | 19}",
    r"\boxed{18 \\ 19}",
    r"\boxed{\begin{aligned} 18 \\ 19 \end{aligned}}",
    r"\boxed{\begin{cases} 18 & a \\ 19 & b \end{cases}}",
    r"\boxed{19 \text{ (or 20)}}",
    r"\boxed{18 \text{ or } \boxed{19}}",
    r"\boxed{18} but actually \boxed{19}",
    r"\boxed{18 \] \[ 19}",
    r"\boxed{\max(18,19)}",
    r"\boxed{18, \ldots, 20}",  # read as 20, while "18, 19, 20" is a set
]


@pytest.mark.parametrize("response", NEVER_CREDITED)
def test_hedge_is_never_credited(verifier, response):
    verdicts = {g: score_math(response, g, CFG, verifier) for g in CANDIDATES}
    assert not any(r.correct for r in verdicts.values()), verdicts


@pytest.mark.parametrize("response", AT_MOST_ONE)
def test_several_values_credit_at_most_one(verifier, response):
    credited = [g for g in CANDIDATES if score_math(response, g, CFG, verifier).correct]
    assert len(credited) <= 1, credited


def test_joined_boxes_match_a_set_gold_but_not_a_subset_or_superset(verifier):
    assert score_math(r"\boxed{19} or \boxed{20}", r"\{19, 20\}", CFG, verifier).correct
    assert score_math(r"\boxed{20} and \boxed{19}", "19, 20", CFG, verifier).correct
    assert not score_math(r"\boxed{18}, \boxed{19}, \boxed{20}", r"\{19, 20\}", CFG, verifier).correct
    assert not score_math(r"\boxed{19}", "19, 20", CFG, verifier).correct
    assert not score_math(r"\boxed{3} and \boxed{2}", "(2, 3)", CFG, verifier).correct  # order kept


# Equal answers not already in test_rewards_math's table: each must score 1.
EQUAL = [
    (r"\boxed{\pi/2}", r"\frac{\pi}{2}"),
    (r"\boxed{\frac{\pi}{2}}", r"\pi/2"),
    (r"\boxed{(1,2)}", "(1, 2)"),
    (r"\boxed{\left( 1, 2 \right)}", "(1,2)"),
    (r"\boxed{\left\{ 1, 2 \right\}}", r"\{2,1\}"),
    ("\\boxed{\u22123}", "-3"),  # unicode minus
    (r"\boxed{-3}", "\u22123"),
    (r"\boxed{\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}}", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\boxed{1,000,000}", "1000000"),
    (r"\boxed{\$ 1,000}", "1000"),
    (r"\boxed{3\frac{1}{2}}", r"\frac{7}{2}"),
    (r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{\sqrt{2}}{2}"),
    (r"\boxed{\sqrt[3]{8}}", "2"),
    (r"\boxed{\binom{5}{2}}", "10"),
    (r"\boxed{\log_2 8}", "3"),
    (r"\boxed{x=2, y=3}", "(2,3)"),
    (r"\boxed{y = 2x + 1}", "y=2x+1"),
    (r"\boxed{(-\infty, 0) \cup (1, \infty)}", r"(-\infty,0)\cup(1,\infty)"),
    (r"\boxed{\approx 19}", "19"),
    (r"\boxed{19\%}", "0.19"),
    (r"\boxed{0.3333333333}", r"\frac{1}{3}"),  # math-verify compares floats rounded to 6 decimals
    (r"\boxed{1.4142135}", r"\sqrt{2}"),
    (r"\boxed{\text{(B)}}", "B"),
    (r"\boxed{5\ \mathrm{cm}^2}", "5"),
    # `\boxed x` without braces: trailing sentence punctuation and a closing math delimiter are not part of
    # the answer (before the fix: "19." / "19\]" reached math-verify, parse_error, reward 0)
    (r"The answer is \boxed 19.", "19"),
    (r"The answer is \boxed 19, as claimed.", "19"),
    (r"\[\boxed 19\]", "19"),
    (r"\(\boxed 19\)", "19"),
    (r"\boxed 0.5.", r"\frac12"),
]


@pytest.mark.parametrize("response,gold", EQUAL)
def test_equal_answer_scores_one(verifier, response, gold):
    result = score_math(response, gold, CFG, verifier)
    assert (result.reward, result.reason) == (1.0, "correct"), result


@pytest.mark.parametrize("text,content", [
    (r"is \boxed 19.", "19"),
    (r"\[\boxed 19\]", "19"),
    (r"\boxed 5!", "5!"),              # a factorial is not punctuation
    (r"\boxed 1,000", "1,000"),        # only trailing punctuation goes
    (r"\boxed 1, \boxed 2", "1,2"),    # was "1,,2": the comma is the gap between two boxes
    (r"\boxed .", None),               # punctuation only: no argument
])
def test_unbraced_box_argument(text, content):
    assert final_boxes(text).content == content


# math-verify 0.9.0 rejects these equal answers. Debatable where the fix belongs (math-verify's normalisation,
# not a hand-written parser here), so they are documented: strict xfail turns into a failure once math-verify
# accepts them, and the row can move to EQUAL.
MATH_VERIFY_REJECTS = [
    (r"\boxed{5.}", "5", "a trailing period inside the box does not parse"),
    (r"\boxed{1\,000\,000}", "1000000", r"\, as a thousands separator reads as 1*0*0"),
    ("\\boxed{30\u00b0}", "30", "the unicode degree sign does not parse (30^\\circ does)"),
    ("\\boxed{\uff11\uff19}", "19", "full-width digits do not parse"),
    (r"\boxed{\varnothing}", r"\emptyset", r"\varnothing is read as a symbol"),
    (r"\boxed{i^2}", "-1", "i is a plain symbol, not the imaginary unit"),
    (r"\boxed{1e3}", "1000", "e-notation reads as 1*E*3"),
]


@pytest.mark.parametrize("response,gold,why", MATH_VERIFY_REJECTS, ids=[r[0] for r in MATH_VERIFY_REJECTS])
def test_known_limitation_equal_answer_rejected(verifier, response, gold, why):
    result = score_math(response, gold, CFG, verifier)
    if not result.correct:
        pytest.xfail(f"math-verify 0.9.0: {why} ({result.reason})")
    pytest.fail(f"math-verify now accepts {response!r} for {gold!r}: move the row to EQUAL")


def test_known_limitation_lenient_comparisons(verifier):
    """math-verify's semantics, accepted as they are (not hedges: each response is credited for one reading):
    floats are compared after rounding to 6 decimals, so tiny golds cannot be told apart; a percentage
    matches both its number and its fraction; a tuple gold is matched by the set of its entries in order."""
    assert score_math(r"\boxed{0.0000001}", "0.0000002", CFG, verifier).correct
    assert score_math(r"\boxed{19\%}", "19", CFG, verifier).correct
    assert score_math(r"\boxed{19\%}", "0.19", CFG, verifier).correct
    assert score_math(r"\boxed{\{18, 20\}}", "(18, 20)", CFG, verifier).correct
    assert not score_math(r"\boxed{0.333}", r"\frac{1}{3}", CFG, verifier).correct  # 3 decimals: too coarse


def _score_slow_group(texts: list[str], cfg: RewardConfig) -> tuple[list, float]:
    """(results, seconds) of one group on a fresh verifier with cfg's budgets, its lazy imports paid first
    under a roomy budget (with one verifier, as a RewardWorker has)."""
    v = MathVerifier(cfg.math_timeout_s, cfg.math_kill_grace_s, group_timeout_s=cfg.math_group_timeout_s)
    v.start()
    v.timeout_s = 10.0
    v.verify_many("19", ["19"])
    v.timeout_s = cfg.math_timeout_s
    try:
        start = time.monotonic()
        results = score_math_group(texts, "19", cfg, v)
        return results, time.monotonic() - start
    finally:
        v.close()


def test_slow_answers_do_not_cost_the_group_its_verdicts():
    """Several different expensive answers in one group: each becomes a verdict within its own budget, and
    the ordinary answers around them keep theirs."""
    slow = [r"\boxed{9^{9^{9^9}}}", r"\boxed{10^{10^{10}}!}", r"\boxed{(x+1)^{100000}}",
            "\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}"]
    results, elapsed = _score_slow_group([r"\boxed{19}", *slow, r"\boxed{20}", r"\boxed{\frac{38}{2}}"], TIGHT)
    assert [r.reason for r in results[:1] + results[-2:]] == ["correct", "wrong", "correct"], results
    for r in results[1:-2]:
        assert r.reward == 0.0 and r.reason in ("timeout", "parse_error"), r
    budget = TIGHT.math_timeout_s + TIGHT.math_kill_grace_s
    assert elapsed < len(slow) * budget + 15, f"{elapsed:.1f} s"  # + a fresh sympy import after a kill


def test_a_group_of_many_slow_answers_costs_its_budget_not_each_answers_timeout():
    """16 different slow answers used to cost 16 x math_timeout_s (80 s at the defaults): once the group's
    budget is spent each answer left gets a short timer, and the ordinary answers after them still verify."""
    cfg = TIGHT.model_copy(update={"math_group_timeout_s": 2.0})
    slow = [f"\\boxed{{(x+{c})^{{3000}}}}" for c in range(1, 17)]    # 16 distinct, each > 1 s of sympy in Python
    results, elapsed = _score_slow_group([r"\boxed{19}", *slow, r"\boxed{20}", r"\boxed{\frac{38}{2}}"], cfg)
    assert [r.reason for r in results[:1] + results[-2:]] == ["correct", "wrong", "correct"], results
    assert all(r.reward == 0.0 and r.reason in ("timeout", "parse_error") for r in results[1:-2]), results
    assert any("budget was spent" in r.detail for r in results[1:-2]), results
    # the budget, the answer running when it ran out, 16 late timers (5.6 s measured); with each answer
    # given its own 1 s the group took 16.1 s
    assert elapsed < 2.0 + 1.0 + 16 * 0.25 + 4, f"{elapsed:.1f} s"


class _StuckAfterGold(MathVerifier):
    """A real verifier whose child is stopped (SIGSTOP) once it has answered a request's gold: to the parent,
    every answer is stuck in C, where the child's soft timer cannot fire. Which answers do that depends on
    sympy and the machine's load (the red-team's 16 gcd-of-towers answers: 9 kills in one run, 2 in another)."""

    def _read(self, deadline: float):
        msg = super()._read(deadline)
        if msg is not None and "gold_ok" in msg:
            os.kill(self._proc.pid, signal.SIGSTOP)
        return msg


def test_answers_stuck_in_c_cost_a_group_few_kills_past_its_budget():
    """Each answer stuck in C costs a hard kill, the grace and a fresh sympy import, and nothing bounded
    their number: one group of 16 took 60 s with 9 restarts at the defaults on a busy machine. Past the
    group's budget at most MAX_LATE_KILLS kills; the answers left are timeouts, unverified."""
    v = _StuckAfterGold(timeout_s=1.0, kill_grace_s=0.5, group_timeout_s=2.0)
    try:
        gold_ok, _, verdicts = v.verify_many("19", [str(n) for n in range(16)])
    finally:
        v.close()
    assert gold_ok and [verdict for verdict, _ in verdicts] == ["timeout"] * 16, verdicts
    assert v.restarts <= 2 + MAX_LATE_KILLS, v.restarts          # 1.5 s a kill: two fit in the 2 s budget
    # the time is the kills' waits plus a sympy import after each (~1 s idle, 10 s on a loaded machine)
    assert sum(detail.startswith("not verified") for _, detail in verdicts) >= 16 - v.restarts, verdicts


def _golds() -> list[str]:
    golds: dict[str, None] = {}
    for path in sorted(EVAL_DATA.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            golds[str(json.loads(line)["answer"])] = None
    return list(golds)


def test_every_shipped_gold_verifies_against_itself(verifier):
    golds = _golds()
    assert len(golds) >= 50  # the AIME 2024 + 2025 answers
    failed = [(g, r) for g in golds if not (r := score_math(f"\\boxed{{{g}}}", g, CFG, verifier)).correct]
    assert failed == []
