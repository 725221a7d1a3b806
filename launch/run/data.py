"""Math-problem datasets (JSONL or parquet) and how a problem becomes prompt token ids."""

from __future__ import annotations

import json
from pathlib import Path

from rewards.evaluate import Problem

# Skywork-OR1's instruction after the problem (it asks for the answer in \boxed{}).
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def read_rows(path: str | Path) -> list[dict]:
    """The raw records of a JSONL or parquet file, unchanged (a clear error for a missing file or a bad line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
                rows.append(row)
    return rows


def problems_from_rows(rows: list[dict], path: str | Path, prompt_key: str = "problem",
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


def load_problems(path: str | Path, prompt_key: str = "problem", answer_key: str = "answer") -> list[Problem]:
    """Rows with `prompt_key` and `answer_key` (ids and data_source default from the file)."""
    return problems_from_rows(read_rows(path), path, prompt_key, answer_key)


class PromptRenderer:
    """Problem text -> token ids: the tokenizer's chat template when it has one (and it is wanted),
    otherwise `template` (the tiny world's "Q: {problem}\\nA: ")."""

    def __init__(self, tokenizer, chat_template: bool = True, template: str = "{problem}\n"):
        self.tok = tokenizer
        self.use_chat = chat_template and getattr(tokenizer, "chat_template", None) is not None
        self.template = template

    def text(self, problem: str) -> str:
        if self.use_chat:
            return self.tok.apply_chat_template(
                [{"role": "user", "content": f"{problem} {BOXED_INSTRUCTION}"}],
                tokenize=False, add_generation_prompt=True)
        return self.template.format(problem=problem)

    def ids(self, problem: str) -> list[int]:
        return self.tok(self.text(problem), add_special_tokens=not self.use_chat)["input_ids"]
