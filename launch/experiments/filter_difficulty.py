"""Offline difficulty filter: drop the prompts a model never or always solves (Skywork-OR1 data prep).

    python -m launch.experiments.filter_difficulty --model_dir /models/qwen --input math.jsonl --output math.filtered.jsonl --n 8
    python -m launch.experiments.filter_difficulty --tiny --input .cache/tiny-world-v1-s0-w1500-a0.2/data/train.jsonl \\
        --output runs/tiny-train.filtered.jsonl --n 8          # the tiny world's model, template and budget

For every prompt it samples N responses with vLLM (``LLM.generate``, ``SamplingParams(n=N)``, the
engine settings of ``actors.engine.build_llm``), scores them with the run's reward
(``rewards.scoring.score_group``: math-verify on the last ``\\boxed{}``; code data sources go to
the sandbox), and keeps the prompt only if 0 < correct < N: a group whose responses all get the
same reward has zero GRPO advantage, so it teaches nothing. Kept records are written unchanged,
in input order, plus ``pass_rate`` (correct / N; ``--no_pass_rate`` to leave it out). A prompt
whose gold answer cannot be parsed scores 0/N and is dropped with the all-wrong ones (counted as
``bad_gold`` too). With ``--max_model_len`` set, prompts that cannot fit prompt + max_tokens are
dropped and counted as ``too_long``; kept + all-wrong + all-right + too_long = input, always.
``--stats_out FILE`` also writes one line per input record (index, id, correct, n, verdict, reward
reasons; with ``--stats_responses`` the sampled texts), e.g. to look at the pass-rate distribution.

Input: JSONL or parquet, as ``rewards.problems.load_problems`` reads it: flat rows with ``--prompt_key``
(problem) and ``--answer_key`` (answer) fields, or rows in the verl layout (chat-message ``prompt``,
``reward_model.ground_truth``; detected from the columns, or ``--format verl``), kept unchanged in the
output. A verl row the reward cannot score is an error naming it, or with ``--bad_rows skip`` is
dropped and counted as ``rejected`` (kept + all-wrong + all-right + too_long + rejected = input).
Prompts are rendered like the training run renders them (``launch.run.data.PromptRenderer``: the
tokenizer's chat template when it has one, else ``{problem}\\n``; ``--tiny``: the tiny world's
``Q: {problem}\\nA: ``). vLLM and torch are imported
only after the arguments and the input file have been checked, so errors are instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from actors.config import ActorConfig
from actors.engine import build_llm, set_engine_env
from launch.config.install_check import require_own_packages
from launch.config.presets import get_preset
from launch.run.data import PromptRenderer
from launch.worlds import scale_to_world
from rewards.problems import load_problem_set
from rewards.scoring import score_group

Verdict = Literal["kept", "all_wrong", "all_right", "too_long", "rejected"]


@dataclass
class PromptResult:
    """One input record's outcome; ``index`` is its 0-based position in the input file."""

    index: int
    id: str
    correct: int
    n: int
    verdict: Verdict
    reasons: dict[str, int] = field(default_factory=dict)   # reward reason -> responses
    texts: list[str] | None = None                          # the sampled responses (keep_texts=True)


@dataclass
class FilterReport:
    n_input: int
    counts: Counter                   # verdict -> prompts
    bad_gold: int                     # prompts whose gold answer did not parse (inside all_wrong)
    results: list[PromptResult]
    output: Path
    seconds: float
    tokens: int                       # generated response tokens

    @property
    def kept(self) -> int:
        return self.counts["kept"]

    def summary(self) -> dict:
        return {"input": self.n_input, "kept": self.kept, "dropped_all_wrong": self.counts["all_wrong"],
                "dropped_all_right": self.counts["all_right"], "dropped_too_long": self.counts["too_long"],
                "dropped_rejected": self.counts["rejected"],
                "bad_gold": self.bad_gold, "output": str(self.output), "seconds": round(self.seconds, 1),
                "generated_tokens": self.tokens}


def verdict(correct: int, n: int) -> Verdict:
    """kept iff the group has both a correct and a wrong response (non-zero advantage)."""
    if not 0 <= correct <= n:
        raise ValueError(f"correct={correct} outside [0, {n}]")
    return "all_wrong" if correct == 0 else "all_right" if correct == n else "kept"


def read_records(path: str | Path, prompt_key: str, answer_key: str, *, format: str = "auto",
                 bad_rows: str = "fail", log=print) -> tuple[list[dict], list]:
    """The input's raw records and, aligned with them, each one's Problem (None for a rejected row; its
    record is ``{}`` when the line was not a JSON object). A flat row without both fields, or a rejected
    row with ``bad_rows="fail"``, raises naming the row. Code tests are held to the default
    ``RewardConfig`` limits, the ones this tool scores with (``rewards.spec_limits``)."""
    loaded = load_problem_set(path, prompt_key, answer_key, format=format)
    if loaded.rejected and bad_rows == "fail":
        raise ValueError(loaded.describe_rejected() + "; --bad_rows skip filters the others")
    if loaded.cut_rows:
        log(f"[filter] {loaded.describe_cut()}")
    rows = [r if isinstance(r, dict) else {} for r in loaded.rows]
    problems: list = [None] * len(rows)
    for index, problem in zip(loaded.indices, loaded.problems):
        problems[index] = problem
    if loaded.format == "flat":      # as before verl rows existed: a flat row's own data_source, else none
        problems = [p and replace(p, data_source=str(r.get("data_source", ""))) for p, r in zip(problems, rows)]
    return rows, problems


def build_engine(model_dir: str, *, n: int, max_model_len: int, batch_prompts: int, dtype: str, seed: int,
                 cpu_kv_cache_gib: int, tensor_parallel_size: int):
    """A vLLM engine with the actors' settings (``actors.engine.build_llm``); GPU when torch sees one."""
    import torch


    gpus = 1.0 if torch.cuda.is_available() else 0.0
    cfg = ActorConfig(num_actors=1, max_model_len=max_model_len, max_prompts_in_flight=batch_prompts, num_gpus=gpus,
                      tensor_parallel_size=tensor_parallel_size, dtype=dtype, enforce_eager=True,
                      cpu_kv_cache_gib=cpu_kv_cache_gib)
    set_engine_env(cfg)
    return build_llm(cfg, model_dir, seed, max_num_seqs=max(batch_prompts * n, 16))


def sample_and_score(llm, records: list[dict], prompt_ids: list[list[int] | None], *, n: int, temperature: float,
                     top_p: float, max_tokens: int, problems: list, batch_prompts: int, kind: str | None = None,
                     keep_texts: bool = False, log=print) -> tuple[list[PromptResult], int]:
    """N samples per prompt, scored per group; ``None`` ids mark prompts that do not fit (too_long), a
    ``None`` problem a rejected row (rejected, not sampled)."""
    from vllm import SamplingParams


    params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens)
    results: list[PromptResult] = []
    counts: Counter = Counter()
    tokens, start = 0, time.monotonic()
    for lo in range(0, len(records), batch_prompts):
        idx = list(range(lo, min(lo + batch_prompts, len(records))))
        todo = [i for i in idx if prompt_ids[i] is not None and problems[i] is not None]
        outs = llm.generate([{"prompt_token_ids": prompt_ids[i]} for i in todo], params, use_tqdm=False) if todo else []
        by_index = dict(zip(todo, outs))
        for i in idx:
            rec = records[i]
            rid = str(rec.get("id", i))
            if problems[i] is None:
                results.append(PromptResult(i, rid, 0, n, "rejected"))
                counts["rejected"] += 1
                continue
            if i not in by_index:
                results.append(PromptResult(i, rid, 0, n, "too_long"))
                counts["too_long"] += 1
                continue
            texts = [c.text for c in by_index[i].outputs]                      # (n,)
            tokens += sum(len(c.token_ids) for c in by_index[i].outputs)
            scored = score_group(texts, problems[i].answer, problems[i].data_source, kind=kind)
            correct = sum(r.correct for r in scored)
            v = verdict(correct, len(texts))
            counts[v] += 1
            results.append(PromptResult(i, rid, correct, len(texts), v, dict(Counter(r.reason for r in scored)),
                                        texts if keep_texts else None))
        elapsed = time.monotonic() - start
        log(f"[filter] {idx[-1] + 1}/{len(records)} prompts | kept {counts['kept']} all-wrong {counts['all_wrong']} "
            f"all-right {counts['all_right']}" + (f" too-long {counts['too_long']}" if counts["too_long"] else "")
            + f" | {tokens / max(elapsed, 1e-9):.0f} tok/s, {elapsed:.0f}s")
    return results, tokens


def write_kept(records: list[dict], results: list[PromptResult], output: Path, pass_rate: bool = True) -> int:
    """Kept records, unchanged and in input order (+ ``pass_rate``), written atomically as JSONL."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    kept = 0
    with open(tmp, "w") as f:
        for r in results:
            if r.verdict != "kept":
                continue
            rec = dict(records[r.index])
            if pass_rate:
                rec["pass_rate"] = r.correct / r.n
            f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
            kept += 1
    os.replace(tmp, output)
    return kept


def write_stats(results: list[PromptResult], path: Path) -> None:
    """One JSON line per input record: index, id, correct, n, verdict, reasons (and texts if kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in results:
            row = {"index": r.index, "id": r.id, "correct": r.correct, "n": r.n, "verdict": r.verdict,
                   "reasons": r.reasons}
            if r.texts is not None:
                row["texts"] = r.texts
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def filter_difficulty(input: str | Path, output: str | Path, *, model_dir: str | None = None, n: int = 8,
                      max_tokens: int | None = None, temperature: float = 1.0, top_p: float = 1.0,
                      tiny: bool = False, prompt_key: str = "problem", answer_key: str = "answer",
                      format: str = "auto", bad_rows: str = "fail",
                      chat_template: bool = True, max_model_len: int | None = None, batch_prompts: int = 64,
                      dtype: str = "auto", seed: int = 0, cpu_kv_cache_gib: int = 1, tensor_parallel_size: int = 1,
                      kind: str | None = None, pass_rate: bool = True, keep_texts: bool = False,
                      limit: int | None = None, stats_out: str | Path | None = None, log=print) -> FilterReport:
    """Sample, score, filter and write; returns the books (per-prompt correct counts included)."""
    if n < 2:
        raise ValueError(f"n={n}: need at least 2 samples per prompt to tell kept from dropped")
    start = time.monotonic()
    input, output = Path(input), Path(output)
    if input.resolve() == output.resolve():
        raise ValueError(f"--output {output} would overwrite --input")
    records, problems = read_records(input, prompt_key, answer_key, format=format, bad_rows=bad_rows, log=log)
    if limit is not None:
        records, problems = records[:limit], problems[:limit]
    template = "{problem}\n"
    if tiny:
        from launch.worlds.tiny.build import ensure_tiny_world    # only with --tiny: it imports torch
        from launch.worlds.tiny.task import PROMPT_TEMPLATE

        model_dir, template, chat_template = model_dir or str(ensure_tiny_world().model_dir), PROMPT_TEMPLATE, False
        dtype = "float32" if dtype == "auto" else dtype
    if not model_dir:
        raise ValueError("--model_dir is required (or --tiny for the tiny world's model)")
    if not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: not a Hugging Face model directory (no config.json)")
    max_tokens = max_tokens or _default_max_tokens(tiny)

    from transformers import AutoTokenizer

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(model_dir), chat_template, template)
    ids = [renderer.ids(p) if p is not None else [] for p in problems]
    longest = max(len(x) for x in ids) + max_tokens
    if max_model_len is None:
        max_model_len = max(longest, 16)
    fits: list[list[int] | None] = [x if len(x) + max_tokens <= max_model_len else None for x in ids]
    log(f"[filter] {len(records)} prompts from {input}; model {model_dir}; n={n} τ={temperature} "
        f"max_tokens={max_tokens} max_model_len={max_model_len}")

    llm = build_engine(model_dir, n=n, max_model_len=max_model_len,
                       batch_prompts=batch_prompts, dtype=dtype, seed=seed, cpu_kv_cache_gib=cpu_kv_cache_gib,
                       tensor_parallel_size=tensor_parallel_size)
    log(f"[filter] engine ready after {time.monotonic() - start:.0f}s")
    results, tokens = sample_and_score(llm, records, fits, n=n, temperature=temperature, top_p=top_p,
                                       max_tokens=max_tokens, problems=problems, batch_prompts=batch_prompts,
                                       kind=kind, keep_texts=keep_texts, log=log)
    write_kept(records, results, output, pass_rate)
    if stats_out:
        write_stats(results, Path(stats_out))
    counts = Counter(r.verdict for r in results)
    bad_gold = sum(1 for r in results if r.reasons.get("bad_gold"))
    report = FilterReport(len(records), counts, bad_gold, results, output, time.monotonic() - start, tokens)
    assert sum(counts.values()) == len(records)
    return report


def _default_max_tokens(tiny: bool) -> int:
    """The first stage's response budget of the baseline preset (tiny: as --tiny scales it)."""
    cfg = get_preset("baseline")
    return (scale_to_world(cfg, "tiny") if tiny else cfg).data.stages[0].max_tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, type=Path, help="JSONL or parquet of problems")
    ap.add_argument("--output", required=True, type=Path, help="JSONL of the kept records")
    ap.add_argument("--model_dir", help="Hugging Face model directory (default with --tiny: the tiny world's)")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (N)")
    ap.add_argument("--max_tokens", type=int, default=None,
                    help="response budget (default: the baseline preset's first stage; 16 with --tiny)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top_p", type=float, default=1.0)
    ap.add_argument("--tiny", action="store_true", help="the tiny world: its model, prompt template and budget")
    ap.add_argument("--prompt_key", default="problem")
    ap.add_argument("--answer_key", default="answer")
    ap.add_argument("--format", choices=["auto", "flat", "verl"], default="auto",
                    help="input rows: flat (prompt_key/answer_key) or the verl layout; auto: from the columns")
    ap.add_argument("--bad_rows", choices=["fail", "skip"], default="fail",
                    help="a verl row the reward cannot score: stop naming it, or drop it as 'rejected'")
    ap.add_argument("--no_chat_template", action="store_true", help="render '{problem}\\n' even if the tokenizer has a chat template")
    ap.add_argument("--max_model_len", type=int, default=None,
                    help="engine context; prompts that do not fit with max_tokens are dropped (default: fit the longest)")
    ap.add_argument("--batch_prompts", type=int, default=64, help="prompts per generate call (progress is printed after each)")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--tensor_parallel_size", type=int, default=1)
    ap.add_argument("--kind", choices=["math", "code"], default=None, help="force a reward kind (default: route by data source)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="only the first LIMIT records")
    ap.add_argument("--stats_out", type=Path, default=None,
                    help="also write one JSON line per input record: index, id, correct, n, verdict, reward reasons")
    ap.add_argument("--stats_responses", action="store_true", help="include the sampled responses in --stats_out")
    ap.add_argument("--no_pass_rate", action="store_true", help="write the kept records without a pass_rate field")
    args = ap.parse_args(argv)
    require_own_packages()
    try:
        report = filter_difficulty(
            args.input, args.output, model_dir=args.model_dir, n=args.n, max_tokens=args.max_tokens,
            temperature=args.temperature, top_p=args.top_p, tiny=args.tiny, prompt_key=args.prompt_key,
            answer_key=args.answer_key, format=args.format, bad_rows=args.bad_rows,
            chat_template=not args.no_chat_template, max_model_len=args.max_model_len,
            batch_prompts=args.batch_prompts, dtype=args.dtype, seed=args.seed,
            tensor_parallel_size=args.tensor_parallel_size, kind=args.kind, pass_rate=not args.no_pass_rate,
            limit=args.limit, stats_out=args.stats_out, keep_texts=args.stats_responses)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = report.summary()
    print(f"[filter] kept {s['kept']} / {s['input']} | dropped all-wrong {s['dropped_all_wrong']} "
          f"(bad gold {s['bad_gold']}), all-right {s['dropped_all_right']}"
          + (f", too long {s['dropped_too_long']}" if s["dropped_too_long"] else "")
          + (f", rejected {s['dropped_rejected']}" if s["dropped_rejected"] else "") + f" -> {report.output}")
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
