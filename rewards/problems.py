"""Problem records and the project's one reader of JSONL (and parquet) files.

Training sets, held-out sets (AIME), the tiny and reasoning worlds' data, and a run's
``metrics.jsonl`` are all JSON lines; every reader goes through :func:`read_jsonl`, so a bad
line fails with its file and line number everywhere; the worlds write theirs with
:func:`write_jsonl`, a run appends its metrics rows with :func:`append_jsonl`. Problems:
:func:`load_problems` (a bare name such as ``aime24`` is looked up in :func:`default_data_dir`), from
flat rows (``problem``/``answer`` fields) or rows in the verl layout (``rewards.verl_format``: chat
messages, ``reward_model.ground_truth``), detected from the columns or chosen with ``format``.
A row that cannot be scored is rejected with its row number and reason (:class:`ProblemSet`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

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


@dataclass
class ProblemSet:
    """The problems of one file, where each came from, and the rows that could not be used."""
    path: Path
    format: str                                   # "flat" or "verl"
    problems: list[Problem]
    indices: list[int]                            # 0-based row of each problem
    rejected: list[RejectedRow] = field(default_factory=list)

    def describe_rejected(self, limit: int = 10) -> str:
        shown = "; ".join(f"row {r.row}: {r.reason}" for r in self.rejected[:limit])
        more = f"; ... {len(self.rejected) - limit} more" if len(self.rejected) > limit else ""
        return f"{self.path}: {len(self.rejected)} row(s) rejected ({shown}{more})"


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
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows = []
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if allow_torn_tail and n == len(lines) and not line.endswith("\n"):
                break
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL or parquet file, unchanged."""
    path = Path(path)
    if path.suffix == ".parquet":
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    return read_jsonl(path)


def problems_from_rows(rows: list[dict[str, Any]], path: str | Path, prompt_key: str = "problem",
                       answer_key: str = "answer") -> list[Problem]:
    """One Problem per row (ids and data_source default from the file name); missing fields raise."""
    path = Path(path)
    problems = []
    for n, row in enumerate(rows, 1):
        missing = [k for k in (prompt_key, answer_key) if k not in row]
        if missing:
            raise ValueError(f"{path} row {n}: missing field(s) {missing}; has {sorted(row)}")
        problems.append(Problem(id=str(row.get("id", f"{path.stem}-{n}")),
                                data_source=str(row.get("data_source", path.stem)),
                                problem=str(row[prompt_key]), answer=str(row[answer_key])))
    if not problems:
        raise ValueError(f"{path}: no problems")
    return problems


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


def _verl_problems(rows: list[dict[str, Any]], path: Path, code_sources: tuple[str, ...]) -> ProblemSet:
    from rewards.verl_format import (
        RowRejected,
        code_spec,
        ground_truth_of,
        is_code_row,
        math_answer,
        messages_of,
    )

    out = ProblemSet(path, "verl", [], [])
    for n, row in enumerate(rows, 1):
        try:
            if not isinstance(row.get("reward_model"), dict):
                raise RowRejected("no reward_model object (the verl layout's reward_model: {style, ground_truth})")
            messages, gt = messages_of(row), ground_truth_of(row)
            extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
            answer = code_spec(gt, extra) if is_code_row(row, code_sources) else math_answer(gt)
        except RowRejected as exc:
            out.rejected.append(RejectedRow(n, str(exc)))
            continue
        index = extra.get("index", extra.get("id"))
        problem_id = str(row.get("id", f"{path.stem}-{index if index is not None else n}"))
        user = [content for role, content in messages if role == "user"][-1]
        out.problems.append(Problem(problem_id, str(row.get("data_source") or path.stem), user, answer, messages))
        out.indices.append(n - 1)
    return out


def load_problem_set(path: str | Path, prompt_key: str = "problem", answer_key: str = "answer", *,
                     format: DataFormat = "auto", code_sources: tuple[str, ...] | None = None) -> ProblemSet:
    """Every usable problem of a JSONL or parquet file and every rejected row. ``format`` "auto" reads
    the verl layout when the first row has its marks (``rewards.verl_format.is_verl_row``).
    ``code_sources``: data_source prefixes that are code (default ``RewardConfig.code_data_sources``).
    A flat file with a row lacking a field raises (the whole file is in the wrong shape)."""
    from rewards.verl_format import is_verl_row

    p = _resolve_path(path)
    rows = read_rows(p)
    if not rows:
        raise ValueError(f"{p}: no problems")
    if format == "verl" or (format == "auto" and is_verl_row(rows[0])):
        if code_sources is None:
            from rewards.config import RewardConfig
            code_sources = RewardConfig().code_data_sources
        return _verl_problems(rows, p, code_sources)
    if format not in ("auto", "flat"):
        raise ValueError(f"unknown data format {format!r}: auto, flat or verl")
    problems = problems_from_rows(rows, p, prompt_key, answer_key)
    return ProblemSet(p, "flat", problems, list(range(len(problems))))


def load_problems(path: str | Path, prompt_key: str = "problem", answer_key: str = "answer", *,
                  format: DataFormat = "auto", bad_rows: Literal["fail", "skip"] = "fail",
                  code_sources: tuple[str, ...] | None = None, log=print) -> list[Problem]:
    """Problems from a JSONL or parquet file (flat or verl layout); a bare name ("aime24",
    "aime24.jsonl") that is not a file is looked up in :func:`default_data_dir`. Rejected rows raise
    ``ValueError`` naming them (``bad_rows="fail"``), or are skipped with one line naming them (``"skip"``)."""
    loaded = load_problem_set(path, prompt_key, answer_key, format=format, code_sources=code_sources)
    if loaded.rejected and (bad_rows == "fail" or not loaded.problems):
        raise ValueError(loaded.describe_rejected(10) + ("" if loaded.problems else "; no usable row")
                         + "; --data.bad_rows skip trains on the others")
    if loaded.rejected:
        log(f"[data] {loaded.describe_rejected(10)}; training on the other {len(loaded.problems)}")
    return loaded.problems
