"""Math reward, Skywork-OR1 procedure: answer section -> final boxed answer -> math-verify against the gold.

For one group (all responses to one prompt, one gold answer):
  1. keep the text after the last `</think>` (a `<think>` that never closes means no answer: no_box);
  2. take the last `\\boxed{...}` (nested braces matched; `\\fbox{}` and `\\boxed x` accepted) together
     with the boxes joined to it by "and"/"or", commas or spacing, as math-verify joins them when
     Skywork-OR1 hands it the whole answer section (`\\boxed{-2} and \\boxed{1}` -> "-2,1", a set); a box
     followed by prose and then a different box is an intermediate result and does not count (see
     rewards.extract.final_boxes). None or an unclosed last box -> no_box; longer than max_box_chars ->
     parse_error;
  3. parse `\\boxed{<content>}` with math-verify and verify it against the parsed gold. The gold is
     parsed as given and, if that fails, wrapped in `\\boxed{}` (golds like `\\frac12` only parse
     inside a box). One deliberate refinement: a gold *without* math delimiters is tried boxed first,
     because math-verify's plain-expression reading of bare LaTeX can keep only a prefix (`7\\sqrt{2}`
     reads as 7), and trying both forms with "any match wins" would then credit a wrong `7`;
  4. the gold is parsed once per group (even when no response has a box, so a bad gold is always
     reported), and identical extracted answers are verified once.
Reward: correct -> 1; anything else -> 0 (or -1 with signed_reward); an unparseable gold -> 0 with
reason bad_gold for the whole group. Timeouts and parser errors are verdicts, never exceptions
(see rewards.math_verifier for how a timeout is enforced off the main thread).
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.config import RewardConfig
from rewards.extract import extract_boxed_answer
from rewards.math_verifier import MathVerifier, default_verifier
from rewards.result import BAD_GOLD, CORRECT, NO_BOX, PARSE_ERROR, RewardResult


def score_math_group(texts: Sequence[str], gold: str, cfg: RewardConfig | None = None,
                     verifier: MathVerifier | None = None) -> list[RewardResult]:
    """One RewardResult per text, in order. `verifier` defaults to this process's shared one."""
    cfg = cfg or RewardConfig()
    fail = cfg.failure_reward
    results: list[RewardResult | None] = [None] * len(texts)
    pending: dict[str, list[int]] = {}  # distinct extracted answer -> indices of texts that gave it
    for i, text in enumerate(texts):
        box = extract_boxed_answer(text, cfg.max_box_chars, cfg.think_end_tag, cfg.think_start_tag)
        if box.too_long:
            results[i] = RewardResult(fail, PARSE_ERROR, None, box.why)
        elif box.content is None:
            results[i] = RewardResult(fail, NO_BOX, None, box.why)
        elif not box.content.strip():
            results[i] = RewardResult(fail, PARSE_ERROR, box.content, "empty \\boxed{}")
        else:
            pending.setdefault(box.content, []).append(i)

    gold = (gold or "").strip()
    answers = list(pending)
    if gold:
        verifier = verifier or default_verifier(cfg.math_timeout_s, cfg.math_kill_grace_s,
                                                cfg.math_startup_timeout_s, cfg.math_memory_mb,
                                                cfg.math_group_timeout_s)
        gold_ok, gold_detail, verdicts = verifier.verify_many(gold, answers)
    else:
        gold_ok, gold_detail, verdicts = False, "empty gold answer", []
    if not gold_ok:  # the data is at fault: 0 for everyone, so the group carries no signal
        extracted = {i: a for a, idx in pending.items() for i in idx}
        return [RewardResult(0.0, BAD_GOLD, extracted.get(i), gold_detail) for i in range(len(texts))]
    for answer, (verdict, detail) in zip(answers, verdicts, strict=True):
        reward = 1.0 if verdict == CORRECT else fail
        for i in pending[answer]:
            results[i] = RewardResult(reward, verdict, answer, detail)
    return results  # type: ignore[return-value]  # every slot is filled above


def score_math(text: str, gold: str, cfg: RewardConfig | None = None,
               verifier: MathVerifier | None = None) -> RewardResult:
    return score_math_group([text], gold, cfg, verifier)[0]

