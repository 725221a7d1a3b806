"""The math-verify subprocess: reads one JSON request per line on stdin, streams one verdict per line.

Run by rewards.math_verifier as `python -I <this file> MEMORY_MIB IMPORT_PATH`; imports nothing from
lagrl. It is single-threaded, so it *can* use signals: each answer gets a soft SIGALRM budget (math-verify's own
signal timeout is disabled with parsing_timeout=None / timeout_seconds=None and replaced by ours,
which takes float seconds and is raised as a BaseException so math-verify's `except Exception`
cannot swallow it). Work stuck in C (e.g. sympy evaluating 10^(10^10)) never sees the signal; the
parent then kills this process and starts another. Memory is bounded by RLIMIT_AS (argv[1] MiB, set
before anything is imported): an answer that builds a huge number (2^{2^{34}}) fails with MemoryError
instead of growing until the kill. math-verify swallows most of those (the verdict is then "wrong");
one that reaches us is a parse_error that names the limit.

Parsed strings are kept (``ParseCache``): a run's answers repeat across groups and steps (tiny world:
289 distinct boxes in 11K responses), and math-verify's parse (~0.5 ms a small integer, sympy) is
most of a group's scoring; verify on parsed answers is ~0.05 ms. A parse that times out or fails
with an exception is not kept, so it gets its budget again the next time.

Protocol (newline-delimited JSON):
  -> {"ready": true}                                         once, after imports and a warm-up verify
  <- {"gold": str, "preds": [str, ...], "timeout": float, "group_timeout": float, "late_timeout": float}
  -> {"gold_ok": bool, "detail": str}                        gold parsed (or not)
  -> {"v": verdict, "d": detail}  for each pred, in order    verdict: correct|wrong|parse_error|timeout
"""

import ctypes
import json
import logging
import os
import re
import resource
import signal
import sys
import time
from collections import OrderedDict

_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox|\\begin\{(?:equation|align)")


class ParseCache:
    """math-verify's ``parse`` of a string, kept for the ``entries`` most recently used strings of at most
    ``max_chars`` characters (longer ones, rare, are parsed each time). Callers get a fresh list: nothing
    they do to it reaches the cache (the parsed objects are immutable sympy expressions and strings).

    A short string can still parse to a big object (``2^{2^{25}}`` is a 4 MB integer), and a policy
    could box thousands of those: while this process has grown past its size when the cache was made
    by more than ``grow_bytes`` (or a quarter of what ``limit_bytes``, its RLIMIT_AS, leaves), nothing
    is kept and what was is dropped, so the memory a verdict may need stays free (``vm_bytes``: this
    process's address-space size, None where unknown: nothing is kept)."""

    def __init__(self, parse, entries: int = 2048, max_chars: int = 256, grow_bytes: int = 256 << 20,
                 limit_bytes: int = 0, vm_bytes=None):
        self._parse, self.entries, self.max_chars = parse, entries, max_chars
        self._vm_bytes = vm_bytes or _vm_bytes
        base = self._vm_bytes()
        if base is not None and limit_bytes > 0:
            grow_bytes = min(grow_bytes, max(limit_bytes - base, 0) // 4)
        self._cap = None if base is None else base + grow_bytes
        self._kept: OrderedDict[str, tuple] = OrderedDict()
        self.hits = self.misses = self.dropped = 0

    def __call__(self, text: str) -> list:
        kept = self._kept.get(text)
        if kept is not None:
            self._kept.move_to_end(text)
            self.hits += 1
            return list(kept)
        self.misses += 1
        parsed = self._parse(text, parsing_timeout=None)   # a timeout or an error propagates: nothing kept
        if len(text) <= self.max_chars and self._room():
            self._kept[text] = tuple(parsed)
            if len(self._kept) > self.entries:
                self._kept.popitem(last=False)
        return parsed

    def _room(self) -> bool:
        size = self._vm_bytes()
        if size is not None and self._cap is not None and size <= self._cap:
            return True
        if self._kept:
            self._kept.clear()
            self.dropped += 1
        return False


def _vm_bytes() -> int | None:
    """This process's address-space size (what RLIMIT_AS bounds), from /proc; None where unreadable."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _SoftTimeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _SoftTimeout()


def _die_with_parent() -> None:
    try:  # PR_SET_PDEATHSIG = 1: a verifier stuck in C must not outlive its reward worker.
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def _limit_memory() -> int:
    """RLIMIT_AS from argv[1] (MiB; 0 or absent: none). -> the limit in bytes."""
    limit = int(sys.argv[1]) << 20 if len(sys.argv) > 1 else 0
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def _extend_path() -> None:
    """-I ignores PYTHONPATH and the user site; the parent passes the folders it imports math-verify
    from (a --target install on an offline GPU host, say) as argv[2]."""
    if len(sys.argv) > 2:
        sys.path.extend(p for p in sys.argv[2].split(os.pathsep) if p and p not in sys.path)


def main() -> None:
    _die_with_parent()
    _extend_path()
    limit = _limit_memory()
    logging.disable(logging.CRITICAL)  # "timeout disabled" warnings: we handle timeouts ourselves.
    from math_verify import parse as mv_parse, verify

    signal.signal(signal.SIGALRM, _alarm)
    # The protocol gets a private copy of fd 1; anything a library prints from now on goes to /dev/null
    # (stderr is the parent's start-up log until here: it shows why an import failed).
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr

    def send(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def timed(fn, timeout):
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    # math-verify and sympy import much of themselves on first use (~1 s, more on a loaded machine): done
    # here, inside the start-up budget, so neither the first answer nor the first after a restart is
    # charged with it and read as a timeout
    try:
        verify(mv_parse("\\boxed{\\frac{1}{2}}", parsing_timeout=None), mv_parse("0.5", parsing_timeout=None),
               timeout_seconds=None)
    except Exception:       # a warm-up only: the answers' own calls report what is wrong
        pass
    parse = ParseCache(mv_parse, limit_bytes=limit)    # after the warm-up: the baseline of the memory kept
    send({"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        gold, timeout = req["gold"], float(req["timeout"])
        # once the group's budget (what is left of it, in a request resent after a kill) is spent, each
        # answer left gets the short late timer
        group_deadline = time.monotonic() + float(req["group_timeout"])
        try:
            # A gold with math delimiters is parsed as given, else boxed first; the other form is the
            # fallback. Without delimiters math-verify's plain-expression reading may take only a
            # prefix (7 from 7\sqrt{2}); accepting either form would then credit a wrong "7".
            boxed = "\\boxed{" + gold + "}"
            golds = []
            for form in ((gold, boxed) if _DELIMITED.search(gold) else (boxed, gold)):
                parsed = timed(lambda: parse(form), timeout)
                if parsed:
                    golds = [parsed]
                    break
            send({"gold_ok": bool(golds), "detail": "" if golds else "math-verify cannot parse the gold answer"})
        except _SoftTimeout:
            golds = []
            send({"gold_ok": False, "detail": "gold answer parse timed out"})
        except Exception as e:  # noqa: BLE001 - a verifier bug must become a verdict, not a dead worker
            golds = []
            send({"gold_ok": False, "detail": f"gold parse error: {type(e).__name__}: {e}"[:300]})
        if not golds:
            continue
        for pred in req["preds"]:
            late = time.monotonic() >= group_deadline
            budget = min(timeout, float(req["late_timeout"])) if late else timeout
            try:
                verdict, detail = timed(lambda: _judge(parse, verify, golds, pred), budget)
            except _SoftTimeout:
                verdict, detail = "timeout", f"math-verify exceeded {budget:g} s" + (
                    " (the group's budget was spent)" if late else "")
            except MemoryError:
                verdict, detail = "parse_error", f"MemoryError: over the verifier's {limit >> 20} MiB memory limit"
            except Exception as e:  # noqa: BLE001
                verdict, detail = "parse_error", f"{type(e).__name__}: {e}"[:300]
            send({"v": verdict, "d": detail})


def _judge(parse, verify, golds, pred: str):
    """Verify the boxed answer against the parsed gold (Skywork-OR1; see main for which gold form).
    ``parse``: text -> math-verify's parse of it (a ParseCache). math-verify falls back to the raw
    string when LaTeX does not parse (so text answers can still match by string); a failed match on
    such a string-only parse is reported as parse_error."""
    parsed = parse("\\boxed{" + pred + "}")
    if not parsed:
        return "parse_error", "math-verify found no expression in the box"
    for gold in golds:
        if verify(gold, parsed, timeout_seconds=None):
            return "correct", ""
    if all(isinstance(p, str) for p in parsed):
        return "parse_error", f"not parseable as math: {parsed[0][:120]!r}"
    return "wrong", f"parsed as {str(parsed[0])[:120]}"


if __name__ == "__main__":
    main()
