"""Cheap, linear-time text extraction: the answer section, the last \\boxed{}, the last code block.

Why our own extraction instead of handing math-verify the whole response: a response can be
megabytes long and math-verify's regexes and parser then dominate scoring time and can stall on
degenerate input; Skywork-OR1 only credits the final boxed answer anyway. Every search here is a
C-level `str.rfind`/regex scan, and brace matching walks at most `max_chars` characters, so a 1 MB
response costs about a millisecond.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# A brace, or an escaped character (so `\{` / `\}` inside a set do not change the depth).
_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)
_BOX_COMMANDS = ("\\boxed", "\\fbox")
# `\boxed 5` (no braces): the argument runs to the next whitespace, `$` or end.
_SPACE_ARG = re.compile(r"[ \t]+([^\s$]+)")
_OPEN_BRACE = re.compile(r"\s*\{")
_CODE_LANGS = {"", "python", "py", "python3"}


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
    cmd_end = start + (6 if text.startswith("\\boxed", start) else 5)
    brace = _OPEN_BRACE.match(text, cmd_end)
    if brace is None:
        m = _SPACE_ARG.match(text, cmd_end)
        if m is None:
            return Boxed(None, "\\boxed without an argument")
        arg = m.group(1)
        return Boxed(None, f"box content longer than {max_chars} characters", True) \
            if len(arg) > max_chars else Boxed(arg)
    i = brace.end() - 1
    depth = 0
    for m in _BRACE_OR_ESCAPE.finditer(text, i, min(len(text), i + max_chars + 2)):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return Boxed(text[i + 1:m.start()])
    if len(text) - i > max_chars + 1:
        return Boxed(None, f"box content longer than {max_chars} characters", True)
    return Boxed(None, "unclosed \\boxed{")


def extract_boxed_answer(text: str, max_chars: int = 4096, end_tag: str = "</think>",
                         start_tag: str = "<think>") -> Boxed:
    """answer_section + last_boxed: the Skywork-OR1 answer extraction in one call."""
    section = answer_section(text, end_tag, start_tag)
    if section is None:
        return Boxed(None, f"reasoning section opened ({start_tag}) but never closed")
    return last_boxed(section, max_chars)


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
