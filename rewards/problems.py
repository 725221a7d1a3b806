"""Problem records and the project's one reader of JSONL (and parquet) files.

Training sets, held-out sets (AIME), the tiny and reasoning worlds' data, and a run's
``metrics.jsonl`` are all JSON lines; every reader goes through :func:`read_jsonl`, so a bad
line fails with its file and line number everywhere (a problem file's loader reads it with
:func:`read_problem_rows`: the same parse, the bad line a rejected row); the worlds write theirs with
:func:`write_jsonl`, a run appends its metrics rows with :func:`append_jsonl`. Problems:
:func:`load_problems` (a bare name such as ``aime24`` is looked up in :func:`default_data_dir`), from
flat rows (``problem``/``answer`` fields) or rows in the verl layout (``rewards.verl_format``: chat
messages, ``reward_model.ground_truth``), detected from the columns or chosen with ``format``.
A row that cannot be scored is rejected with its row number and reason (:class:`ProblemSet`): a line
of a problem file that is not a JSON object too (:func:`read_problem_rows`), and a code test spec over
the size limits (``rewards.spec_limits``; more than ``code_max_tests`` tests are cut, not refused).
Rows are numbered from 1 over the file's non-blank lines (parquet: its records).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal

if TYPE_CHECKING:
    from rewards.spec_limits import SpecLimits

DataFormat = Literal["auto", "flat", "verl"]


@dataclass(frozen=True)
class Problem:
    id: str
    data_source: str
    problem: str
    answer: str
    # verl layout: the chat messages as (role, content), rendered with the tokenizer's chat template;
    # `problem` is then the last user message (for logs and stats)
    messages: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class RejectedRow:
    row: int          # 1-based, as in every message of this module
    reason: str


@dataclass(frozen=True)
class Unreadable:
    """A problem file's line that is not a JSON object, kept in its row's place (rejected at load)."""
    reason: str


@dataclass
class ProblemSet:
    """The problems of one file, where each came from, and the rows that could not be used."""
    path: Path
    format: str                                   # "flat" or "verl"
    problems: list[Problem]
    indices: list[int]                            # 0-based row of each problem
    rejected: list[RejectedRow] = field(default_factory=list)
    rows: list[dict[str, Any] | Unreadable] = field(default_factory=list, repr=False)   # as read
    cut_rows: list[int] = field(default_factory=list)   # 1-based rows whose tests were cut to max_tests
    max_tests: int = 0

    def describe_rejected(self, limit: int = 10) -> str:
        shown = "; ".join(f"row {r.row}: {r.reason}" for r in self.rejected[:limit])
        more = f"; ... {len(self.rejected) - limit} more" if len(self.rejected) > limit else ""
        return f"{self.path}: {len(self.rejected)} row(s) rejected ({shown}{more})"

    def describe_cut(self) -> str:
        rows = ", ".join(map(str, self.cut_rows[:10])) + (", ..." if len(self.cut_rows) > 10 else "")
        return (f"{self.path}: {len(self.cut_rows)} code problem(s) have more than {self.max_tests} tests, cut to "
                f"their first {self.max_tests} (code_max_tests: the rest would never run; rows {rows})")


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> None:
    """One JSON object per line, keys sorted (a deterministic file for the same rows)."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def append_jsonl(row: dict[str, Any], path: str | Path) -> None:
    """One more JSON object at the end of ``path``, keys in the row's order; numbers JSON does not know
    (numpy scalars) are written as floats. A reader may meet the line half written (``allow_torn_tail``)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")


def read_jsonl(path: str | Path, *, allow_torn_tail: bool = False) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order (blank lines skipped).

    A line that is not a JSON object raises ``ValueError`` naming the file and line, except a last
    line without its newline when ``allow_torn_tail``: a file another process is still appending
    to (a running run's metrics) may end mid-row.
    """
    path = Path(path)
    rows = []
    lines = _lines(path)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(_json_object(line))
        except ValueError as exc:
            if isinstance(exc, _NotJSON) and allow_torn_tail and n == len(lines) and not line.endswith("\n"):
                break
            raise ValueError(f"{path}:{n}: {exc}") from None
    return rows


def read_problem_rows(path: str | Path) -> list[dict[str, Any] | Unreadable]:
    """The records of a JSONL or parquet problem file; a line that is not a JSON object (not JSON, nested
    too deep to read, another JSON value) is an :class:`Unreadable` in its row's place, so the load rejects
    that row by number instead of giving up the whole file."""
    path = Path(path)
    if path.suffix == ".parquet":
        return read_rows(path)
    rows: list[dict[str, Any] | Unreadable] = []
    for n, line in enumerate(_lines(path), 1):
        if line.strip():
            try:
                rows.append(_json_object(line))
            except ValueError as exc:
                rows.append(Unreadable(f"{path.name}:{n}: {exc}"))
    return rows


class _NotJSON(ValueError):
    """The line does not parse (a torn last line may be forgiven); the other ValueErrors never are."""


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        return f.readlines()


def _json_object(line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _NotJSON(f"not JSON ({exc.msg})") from None
    except RecursionError:              # the decoder's guard against deep nesting
        raise ValueError("nested too deep to read") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    return row


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL or parquet file, unchanged."""
    path = Path(path)
    if path.suffix == ".parquet":
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    return read_jsonl(path)


def default_data_dir() -> Path:
    """Where bare names such as "aime24" are looked up: ``$LAGRL_DATA_DIR``, else ``../shared/data``
    next to the repository when present, else the copy shipped in ``rewards/eval_data``."""
    if os.environ.get("LAGRL_DATA_DIR"):
        return Path(os.environ["LAGRL_DATA_DIR"])
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return shared if (shared / "aime24.jsonl").exists() else Path(__file__).resolve().parent / "eval_data"


def _resolve_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists() and not p.is_absolute() and p.suffix in ("", ".jsonl"):
        p = default_data_dir() / (p.name if p.suffix == ".jsonl" else f"{p.name}.jsonl")
    return p


def _problem_set(rows: list[dict[str, Any] | Unreadable], path: Path, fmt: str, convert,
                 max_tests: int) -> ProblemSet:
    """``convert(row, n) -> (Problem, tests cut)`` for every row. A row it refuses (RowRejected), an
    unreadable line, and a row too deep or too large to convert are rejected with their row number;
    anything else it raises ends the load (a flat file missing a field is in the wrong shape)."""
    from rewards.verl_format import RowRejected

    out = ProblemSet(path, fmt, [], [], rows=rows, max_tests=max_tests)
    for n, row in enumerate(rows, 1):
        try:
            if isinstance(row, Unreadable):
                raise RowRejected(row.reason)
            problem, cut = convert(row, n)
        except RecursionError:          # json's guard or a repr: deeper than this interpreter's stack
            out.rejected.append(RejectedRow(n, "nested too deep to convert (RecursionError)"))
        except MemoryError:
            out.rejected.append(RejectedRow(n, "too large to convert (MemoryError)"))
        except RowRejected as exc:
            out.rejected.append(RejectedRow(n, str(exc)))
        else:
            out.problems.append(problem)
            out.indices.append(n - 1)
            if cut:
                out.cut_rows.append(n)
    return out


def _verl_row(row: dict[str, Any], n: int, path: Path, code_sources: tuple[str, ...],
              limits: SpecLimits) -> tuple[Problem, int]:
    from rewards.verl_format import (
        RowRejected,
        bounded_code_spec,
        ground_truth_of,
        is_code_row,
        math_answer,
        messages_of,
    )

    if not isinstance(row.get("reward_model"), dict):
        raise RowRejected("no reward_model object (the verl layout's reward_model: {style, ground_truth})")
    messages, gt = messages_of(row), ground_truth_of(row)
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    if is_code_row(row, code_sources):
        bounded = bounded_code_spec(gt, extra, limits)
        answer, cut = bounded.answer, bounded.cut
    else:
        answer, cut = math_answer(gt), 0
    index = extra.get("index", extra.get("id"))
    problem_id = str(row.get("id", f"{path.stem}-{index if index is not None else n}"))
    user = [content for role, content in messages if role == "user"][-1]
    return Problem(problem_id, str(row.get("data_source") or path.stem), user, answer, messages), cut


def _flat_row(row: dict[str, Any], n: int, path: Path, prompt_key: str, answer_key: str,
              limits: SpecLimits) -> tuple[Problem, int]:
    """Ids and data_source default from the file name. An answer that is a JSON test spec is checked and
    cut like a verl row's code ground truth (``rewards.scoring`` sends it to the sandbox)."""
    from rewards.spec_limits import SpecTooLarge, bound_spec, is_spec_object
    from rewards.verl_format import RowRejected

    missing = [k for k in (prompt_key, answer_key) if k not in row]
    if missing:
        raise ValueError(f"{path} row {n}: missing field(s) {missing}; has {sorted(row)}")
    answer, cut = str(row[answer_key]), 0
    if is_spec_object(answer):
        try:
            bounded = bound_spec(answer, limits)
        except SpecTooLarge as exc:
            raise RowRejected(str(exc)) from None
        except ValueError as exc:
            raise RowRejected(f"the answer is a code test spec the sandbox cannot read: {exc}") from None
        answer, cut = bounded.answer, bounded.cut
    return Problem(id=str(row.get("id", f"{path.stem}-{n}")), data_source=str(row.get("data_source", path.stem)),
                   problem=str(row[prompt_key]), answer=answer), cut


def load_problem_set(path: str | Path, prompt_key: str = "problem", answer_key: str = "answer", *,
                     format: DataFormat = "auto", code_sources: tuple[str, ...] | None = None,
                     limits: SpecLimits | None = None) -> ProblemSet:
    """Every usable problem of a JSONL or parquet file and every rejected row. ``format`` "auto" reads
    the verl layout when the first readable row has its marks (``rewards.verl_format.is_verl_row``).
    ``code_sources``: data_source prefixes that are code (default ``RewardConfig.code_data_sources``);
    ``limits``: what a code test spec may hold (default ``SpecLimits.of(RewardConfig())``).
    A flat file with a row lacking a field raises (the whole file is in the wrong shape)."""
    from rewards.config import RewardConfig
    from rewards.spec_limits import SpecLimits
    from rewards.verl_format import is_verl_row

    if format not in ("auto", "flat", "verl"):
        raise ValueError(f"unknown data format {format!r}: auto, flat or verl")
    p = _resolve_path(path)
    rows = read_problem_rows(p)
    if not rows:
        raise ValueError(f"{p}: no problems")
    limits = limits if limits is not None else SpecLimits.of(RewardConfig())
    first = next((r for r in rows if not isinstance(r, Unreadable)), None)
    if format == "verl" or (format == "auto" and first is not None and is_verl_row(first)):
        sources = code_sources if code_sources is not None else RewardConfig().code_data_sources
        return _problem_set(rows, p, "verl", lambda row, n: _verl_row(row, n, p, sources, limits), limits.max_tests)
    return _problem_set(rows, p, "flat", lambda row, n: _flat_row(row, n, p, prompt_key, answer_key, limits),
                        limits.max_tests)


def load_problems(path: str | Path, prompt_key: str = "problem", answer_key: str = "answer", *,
                  format: DataFormat = "auto", bad_rows: Literal["fail", "skip"] = "fail",
                  code_sources: tuple[str, ...] | None = None, limits: SpecLimits | None = None,
                  log=print) -> list[Problem]:
    """Problems from a JSONL or parquet file (flat or verl layout); a bare name ("aime24",
    "aime24.jsonl") that is not a file is looked up in :func:`default_data_dir`. Rejected rows raise
    ``ValueError`` naming them (``bad_rows="fail"``), or are skipped with one line naming them (``"skip"``).
    Code problems with more than ``limits.max_tests`` tests are cut, with one line saying how many."""
    loaded = load_problem_set(path, prompt_key, answer_key, format=format, code_sources=code_sources,
                              limits=limits)
    if loaded.rejected and (bad_rows == "fail" or not loaded.problems):
        raise ValueError(loaded.describe_rejected(10) + ("" if loaded.problems else "; no usable row")
                         + "; --data.bad_rows skip trains on the others")
    if loaded.rejected:
        log(f"[data] {loaded.describe_rejected(10)}; training on the other {len(loaded.problems)}")
    if loaded.cut_rows:
        log(f"[data] {loaded.describe_cut()}")
    return loaded.problems
