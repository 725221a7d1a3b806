"""Cheap, linear-time text extraction: the answer section, the final boxed answer, the last code block.

Why our own extraction instead of handing math-verify the whole response: a response can be
megabytes long and math-verify's regexes and parser then dominate scoring time and can stall on
degenerate input; Skywork-OR1 credits what math-verify finds in the answer section, which for a
boxed answer is the last box *and the boxes joined to it* (math-verify's `extract_boxed_content`:
`\\boxed{-2} and \\boxed{1}` is the set {-2, 1}). `final_boxes` reproduces that joining with one
deliberate difference: math-verify also joins boxes separated by any short text containing a comma
(`First \\boxed{5}, corrected: \\boxed{6}` would read as {5, 6}); here a revised final answer still
stands alone. Every search is a C-level `str.rfind`/regex scan over a bounded window, and brace
matching walks at most `max_chars` characters, so a 1 MB response costs about a millisecond.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# A brace, or an escaped character (so `\{` / `\}` inside a set do not change the depth).
_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)
_BOX_COMMANDS = ("\\boxed", "\\fbox")
# `\boxed 5` (no braces): the argument runs to the next whitespace, `$`, closing `\)` / `\]` or end, less
# trailing sentence punctuation: "is \boxed 19." and "\[\boxed 19\]" mean 19, and math-verify cannot
# parse "19." or "19\]" (it credits both when given the whole answer section). `!` stays (5! is 120).
_SPACE_ARG = re.compile(r"[ \t]+((?:(?!\\[)\]])[^\s$])+)")
_ARG_TRAILING_PUNCT = ".,;:"
_OPEN_BRACE = re.compile(r"\s*\{")
_CODE_LANGS = {"", "python", "py", "python3"}
# Joining boxes into one answer (see final_boxes). Text between two boxes is first stripped of LaTeX
# spacing, math delimiters and \text{} wrappers; what is left must be punctuation only, or contain
# "and"/"or" with at most a few other words ("\text{ for part (a) and }"), or be an assignment (", y =").
MAX_JOINED_BOXES = 16
_GAP_MAX_CHARS = 70  # math-verify's own limit for text between joined boxes
_GAP_NOISE = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mbox)\s*\{|\\(?:qquad|quad|[,;:! ()\[\]\\])|[$~]")
_WORD = re.compile(r"[A-Za-z]+")
_CONJUNCTIONS = {"and", "or"}
_ASSIGNMENT = re.compile(r"[,;]?\s*[A-Za-z](?:_\{?\w+\}?)?\s*=")


def answer_section(text: str, end_tag: str = "</think>", start_tag: str = "<think>") -> str | None:
    """The text after the last `end_tag`; the whole text when there is no reasoning section; None when
    a reasoning section was opened and never closed (a truncated or rambling response has no answer)."""
    cut = text.rfind(end_tag)
    if cut >= 0:
        return text[cut + len(end_tag):]
    if start_tag in text:
        return None
    return text


class Boxed(NamedTuple):
    """The last box of a text: `content` (None when there is no usable box), why not, and whether the
    box was there but longer than the cap (a parse error, not a missing answer)."""

    content: str | None
    why: str = ""
    too_long: bool = False


def last_boxed(text: str, max_chars: int = 4096) -> Boxed:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` / `\\boxed x`, braces matched.

    No box, or a last box that is unclosed, gives content None: a truncated final answer does not fall
    back to an earlier box (the last box is the answer). Content longer than `max_chars` is flagged
    too_long without being copied.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return Boxed(None, "no \\boxed{} in the answer section")
    return _box_at(text, start, max_chars)[0]


def final_boxes(text: str, max_chars: int = 4096) -> Boxed:
    """The final answer: the last box, joined (in order, with commas) with the boxes just before it when
    only a separator stands between them (`\\boxed{-2} and \\boxed{1}` -> "-2,1"; repeats collapse, as in
    math-verify). A box followed by other words and then another box is an intermediate result: only the
    later one counts. At most MAX_JOINED_BOXES boxes; the joined content obeys `max_chars` like one box."""
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return Boxed(None, "no \\boxed{} in the answer section")
    last, _ = _box_at(text, start, max_chars)
    if last.content is None:
        return last
    parts = [last.content]
    for _ in range(MAX_JOINED_BOXES - 1):
        window = max(0, start - _GAP_MAX_CHARS - max_chars - 8)
        prev = max(text.rfind(cmd, window, start) for cmd in _BOX_COMMANDS)
        if prev < 0:
            break
        box, end = _box_at(text, prev, max_chars)
        if box.content is None or end > start or not _joins(text[end:start]):
            break  # an unusable or enclosing box, or prose between: the group ends here
        if box.content != parts[0]:
            parts.insert(0, box.content)
        start = prev
    joined = ",".join(parts)
    if len(joined) > max_chars:
        return Boxed(None, f"joined box content longer than {max_chars} characters", True)
    return Boxed(joined)


def _joins(gap: str) -> bool:
    """Does the text between two boxes make them one answer? (see _GAP_NOISE and final_boxes)"""
    if len(gap) >= _GAP_MAX_CHARS or gap.count("{") != gap.count("}"):
        return False  # far apart, or the earlier box sits inside something the later one is not in
    rest = _GAP_NOISE.sub(" ", gap).replace("{", "").replace("}", "")
    words = _WORD.findall(rest)
    if not words:
        return True  # "1, 2", "$ $", "\\quad", "; "
    others = [w for w in words if w.lower() not in _CONJUNCTIONS]
    if len(others) < len(words):
        return len(others) <= 3
    return _ASSIGNMENT.fullmatch(" ".join(rest.split())) is not None


def _box_at(text: str, start: int, max_chars: int) -> tuple[Boxed, int]:
    """The box whose command starts at `start`, and the index just past it (-1 when unusable)."""
    cmd_end = start + (6 if text.startswith("\\boxed", start) else 5)
    brace = _OPEN_BRACE.match(text, cmd_end)
    if brace is None:
        m = _SPACE_ARG.match(text, cmd_end)
        if m is None:
            return Boxed(None, "\\boxed without an argument"), -1
        arg = m.group(1).rstrip(_ARG_TRAILING_PUNCT)
        if not arg:
            return Boxed(None, "\\boxed without an argument"), -1
        if len(arg) > max_chars:
            return Boxed(None, f"box content longer than {max_chars} characters", True), -1
        return Boxed(arg), m.start(1) + len(arg)
    i = brace.end() - 1
    depth = 0
    for m in _BRACE_OR_ESCAPE.finditer(text, i, min(len(text), i + max_chars + 2)):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return Boxed(text[i + 1:m.start()]), m.end()
    if len(text) - i > max_chars + 1:
        return Boxed(None, f"box content longer than {max_chars} characters", True), -1
    return Boxed(None, "unclosed \\boxed{"), -1


def extract_boxed_answer(text: str, max_chars: int = 4096, end_tag: str = "</think>",
                         start_tag: str = "<think>") -> Boxed:
    """answer_section + final_boxes: the Skywork-OR1 answer extraction in one call."""
    section = answer_section(text, end_tag, start_tag)
    if section is None:
        return Boxed(None, f"reasoning section opened ({start_tag}) but never closed")
    return final_boxes(section, max_chars)


def extract_code(text: str, end_tag: str = "</think>", start_tag: str = "<think>") -> str | None:
    """The last fenced Python (or untagged) code block of the answer section, else None. Splitting on
    the fences keeps this linear: a regex with a lazy `.*?` would rescan the text from every unclosed
    fence (quadratic on an adversarial response)."""
    section = answer_section(text, end_tag, start_tag)
    if section is None:
        return None
    parts = section.split("```")  # odd indices are inside fences; the last one may be unclosed
    last_closed = len(parts) - 2 if len(parts) % 2 else len(parts) - 3
    for i in range(last_closed, 0, -2):
        lang, newline, body = parts[i].partition("\n")
        if newline and lang.strip().lower() in _CODE_LANGS:
            return body
    return None
