"""Problem records and the project's one reader of JSONL (and parquet) files.

Training sets, held-out sets (AIME), the tiny and reasoning worlds' data, and a run's
``metrics.jsonl`` are all JSON lines; every reader goes through :func:`read_jsonl`, so a bad
line fails with its file and line number everywhere; the worlds write theirs with
:func:`write_jsonl`, a run appends its metrics rows with :func:`append_jsonl`. Problems:
:func:`load_problems` (a bare name such as ``aime24`` is looked up in :func:`default_data_dir`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable


@dataclass(frozen=True)
class Problem:
    id: str
    data_source: str
    problem: str
    answer: str


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


def load_problems(path: str | Path, prompt_key: str = "problem", answer_key: str = "answer") -> list[Problem]:
    """Problems from a JSONL or parquet file; a bare name ("aime24", "aime24.jsonl") that is not a
    file is looked up in :func:`default_data_dir`."""
    p = Path(path)
    if not p.exists() and not p.is_absolute() and p.suffix in ("", ".jsonl"):
        p = default_data_dir() / (p.name if p.suffix == ".jsonl" else f"{p.name}.jsonl")
    return problems_from_rows(read_rows(p), p, prompt_key, answer_key)
