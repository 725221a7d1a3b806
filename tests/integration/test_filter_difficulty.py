"""launch.experiments.filter_difficulty on the tiny world: real vLLM sampling, math-verify scoring, the books balance.

The CLI runs in a subprocess (its vLLM engine lowers torch's thread count for the whole process,
which must not leak into other tests). Its per-prompt stats (``--stats_out`` with the responses)
are checked against the kept file and against an independent, math-verify-free reading of the
tiny task's integer answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
N = 4
N_PROBLEMS = 40
BOXED_INT = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def _independent_correct(texts: list[str], answer: str) -> int:
    """Responses whose last ``\\boxed`` is ``\\boxed{<the gold integer>}`` (the tiny task's answers are integers)."""
    last_boxes = (BOXED_INT.match(t, t.rfind("\\boxed")) if "\\boxed" in t else None for t in texts)
    return sum(1 for m in last_boxes if m and int(m.group(1)) == int(answer))


def test_filter_keeps_only_mixed_groups(tiny_world, tmp_path):
    rows = [json.loads(line) for line in tiny_world.train_path.read_text().splitlines()[:N_PROBLEMS]]
    rows = [{**r, "extra": {"tags": ["arith", i], "note": "kept unchanged"}} for i, r in enumerate(rows)]
    rows.append({"id": "bad-gold", "problem": "1+1", "answer": "\\boxed{", "data_source": "tiny_arith"})
    src, out, stats_path = tmp_path / "in.jsonl", tmp_path / "out" / "kept.jsonl", tmp_path / "stats.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))

    proc = subprocess.run(
        [sys.executable, "-m", "launch.experiments.filter_difficulty", "--tiny", "--input", str(src), "--output", str(out),
         "--n", str(N), "--stats_out", str(stats_path), "--stats_responses", "--batch_prompts", "16"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    stats = [json.loads(line) for line in stats_path.read_text().splitlines()]
    kept = [json.loads(line) for line in out.read_text().splitlines()]

    # the books: every input record has exactly one verdict, and the summary adds up
    assert [s["index"] for s in stats] == list(range(len(rows)))
    assert summary["input"] == len(rows)
    assert summary["kept"] + summary["dropped_all_wrong"] + summary["dropped_all_right"] == len(rows)
    assert summary["kept"] == len(kept) == sum(s["verdict"] == "kept" for s in stats)
    assert summary["dropped_all_wrong"] == sum(s["correct"] == 0 for s in stats)
    assert summary["dropped_all_right"] == sum(s["correct"] == s["n"] for s in stats)
    assert 0 < summary["kept"] < len(rows)          # the tiny policy is right some of the time

    # each verdict follows from its own counts; the counts follow from the responses
    for s, row in zip(stats, rows):
        assert s["n"] == N == len(s["texts"]) == sum(s["reasons"].values())
        expected = "all_wrong" if s["correct"] == 0 else "all_right" if s["correct"] == N else "kept"
        assert s["verdict"] == expected, s
        if s["id"] != "bad-gold":
            assert s["correct"] == _independent_correct(s["texts"], row["answer"]), s
    assert stats[-1]["verdict"] == "all_wrong" and stats[-1]["reasons"] == {"bad_gold": N}
    assert summary["bad_gold"] == 1

    # kept records: unchanged, in input order, each with 0 < correct < N and its pass rate
    kept_stats = [s for s in stats if s["verdict"] == "kept"]
    assert [{k: v for k, v in r.items() if k != "pass_rate"} for r in kept] == [rows[s["index"]] for s in kept_stats]
    for r, s in zip(kept, kept_stats):
        assert 0 < s["correct"] < N
        assert r["pass_rate"] == pytest.approx(s["correct"] / N)


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ('{"problem": "1+1"}\n', "missing field(s) ['answer']"),
    ('{"problem": "1+1", "answer": "2"}\nnot json\n', ":2: not JSON"),
])
def test_cli_errors_before_any_engine(tmp_path, content, message):
    src = tmp_path / "in.jsonl"
    if content is not None:
        src.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "launch.experiments.filter_difficulty", "--tiny", "--input", str(src),
                           "--output", str(tmp_path / "out.jsonl")], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out.jsonl").exists()


def test_filter_reads_the_verl_layout_and_scores_code_in_the_sandbox(code_world, tmp_path):
    """The code world's held-out set (verl rows: chat messages, math and code ground truths) plus one row
    the sandbox cannot run: the model's own chat template renders the prompts, code is scored in the
    sandbox, the bad row is counted as rejected, kept rows come back unchanged."""
    from rewards.result import CODE_REASONS, MATH_REASONS

    rows = [json.loads(line) for line in code_world.val_path.read_text().splitlines()][:40]
    bad = {**rows[0], "reward_model": {"style": "rule", "ground_truth": [{"type": "file", "input": "a", "output": "b"}]},
           "data_source": "code_oneliner"}
    rows.append(bad)
    src, out, stats_path = tmp_path / "in.jsonl", tmp_path / "kept.jsonl", tmp_path / "stats.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = [sys.executable, "-m", "launch.experiments.filter_difficulty", "--model_dir", str(code_world.model_dir),
            "--input", str(src), "--output", str(out), "--n", str(N), "--max_tokens", "32", "--dtype", "float32"]
    refused = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "row 41: test 0 has type 'file'" in refused.stderr, refused.stderr[-2000:]
    proc = subprocess.run(base + ["--bad_rows", "skip", "--stats_out", str(stats_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    stats = [json.loads(line) for line in stats_path.read_text().splitlines()]
    assert summary["input"] == len(rows) and summary["dropped_rejected"] == 1 and stats[-1]["verdict"] == "rejected"
    assert summary["kept"] + summary["dropped_all_wrong"] + summary["dropped_all_right"] + 1 == len(rows)
    for s, row in zip(stats[:-1], rows):
        allowed = CODE_REASONS if row["data_source"] == "code_oneliner" else MATH_REASONS
        assert set(s["reasons"]) <= allowed and sum(s["reasons"].values()) == N, (s, row["data_source"])
    code_correct = sum(s["correct"] for s, r in zip(stats, rows) if r["data_source"] == "code_oneliner")
    assert code_correct > 0                       # the policy's programs pass the sandbox's tests sometimes
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "pass_rate"} for r in kept] == \
        [rows[s["index"]] for s in stats if s["verdict"] == "kept"]
