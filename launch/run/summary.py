"""The end of a run: what happened, as a dict (``summary.json``) and as a few readable lines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rewards.problems import read_jsonl


def is_eval_row(row: dict) -> bool:
    return any(k.startswith("eval/") for k in row)


def read_metrics(path: Path) -> list[dict]:
    """The run's step rows from ``metrics.jsonl``, one per step (a step retrained after a resume
    appears twice in the file: its last row wins). An evaluation row in the file is not a retrained
    step: it stays beside its step's row."""
    if not path.exists():
        return []
    rows = {(row["step"], is_eval_row(row)): row for row in read_jsonl(path, allow_torn_tail=True)}
    return [rows[k] for k in sorted(rows)]


def read_evals(path: Path) -> list[dict]:
    """The run's evaluation rows from ``evals.jsonl``, all incarnations, one per step in step order
    (a step evaluated again after a resume: its last row wins)."""
    if not path.exists():
        return []
    rows = {row["step"]: row for row in read_jsonl(path, allow_torn_tail=True)}
    return [rows[k] for k in sorted(rows)]


def read_run_rows(metrics_path: str | Path) -> list[dict]:
    """A run's step rows (:func:`read_metrics`) plus its evaluation rows: those of the file, else
    ``evals.jsonl`` beside it (the driver appends each evaluation there), else for a run written before
    that file existed the ``evals`` of its ``summary.json``. The run may still be running: a torn last
    row is skipped, and a missing or unreadable summary adds nothing."""
    metrics_path = Path(metrics_path)
    rows = read_metrics(metrics_path)
    if any(is_eval_row(row) for row in rows):
        return rows
    if (metrics_path.parent / "evals.jsonl").exists():
        return rows + read_evals(metrics_path.parent / "evals.jsonl")
    try:
        evals = json.loads((metrics_path.parent / "summary.json").read_text()).get("evals") or []
    except (OSError, ValueError, AttributeError):
        return rows
    return rows + [e for e in evals if isinstance(e, dict)]


def _first_last(rows: list[dict], key: str) -> list[float] | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and np.isfinite(r[key])]
    return [float(values[0]), float(values[-1])] if values else None


def guard_summary(rows: list[dict]) -> dict | None:
    """The lag guard's switches (None when the run had no guard) and its on-policy steps."""
    if not any("guard/on_policy" in r for r in rows):
        return None
    events = [r["guard/event"] for r in rows if "guard/event" in r]
    return {"fallbacks": sum(e["kind"] == "fallback" for e in events),
            "recoveries": sum(e["kind"] == "recover" for e in events),
            "on_policy_steps": sum(r.get("mode") == "on_policy" for r in rows), "events": events}


def prime_summary(rows: list[dict]) -> dict | None:
    """PRIME's figures (None for a run without a PRM): the PRM's held-out accuracies first -> last and
    their mean after its first update, the prompt filter's share."""
    prm = [r for r in rows if "prm/loss" in r]
    if not prm:
        return None
    later = prm[1:] or prm
    return {"prm_accuracy": _first_last(prm, "prm/accuracy"),
            "prm_pairwise_accuracy": _first_last(prm, "prm/pairwise_accuracy"),
            "prm_pairwise_accuracy_mean": float(np.mean([r["prm/pairwise_accuracy"] for r in later])),
            "prm_accuracy_mean": float(np.mean([r["prm/accuracy"] for r in later])),
            "filtered_groups": sum(int(r.get("groups/filtered", 0)) for r in prm),
            "filtered_frac_mean": float(np.mean([r.get("prompts/filtered_frac", 0.0) for r in prm]))}


def build_summary(*, run_id: str, preset: str, run_path: Path, steps_total: int, seconds: float,
                  rows: list[dict], evals: list[dict], stop_reason: str, startup: dict | None = None,
                  code_isolation: tuple[str, ...] | None = None) -> dict:
    """``rows``: every step's metrics row; ``evals``: the evaluation rows (first = before training);
    ``startup``: seconds per start-up phase (launch.run.progress.StartupClock); ``code_isolation``: the
    code sandbox's walls on the reward workers (rewards.code_isolation; None when no problem runs code)."""
    trained = sum(int(r.get("groups/trained", 0)) for r in rows)
    lag_means = [r["lag/mean"] for r in rows if "lag/mean" in r]
    return {
        "run_id": run_id, "preset": preset, "run_path": str(run_path), "steps": len(rows),
        "steps_total": steps_total, "stop_reason": stop_reason, "seconds": round(seconds, 1),
        "startup_seconds": dict(startup or {}),
        "evals": evals,
        "accuracy": _first_last(evals, "eval/avg@n"),
        "eval_n": evals[-1]["eval/n"] if evals else None,
        "eval_problems": evals[-1]["eval/problems"] if evals else None,
        "train_accuracy": _first_last(rows, "reward/accuracy"),
        "entropy": _first_last(rows, "entropy/mean"),
        "length": _first_last(rows, "length/mean"),
        "lag_mean": float(np.mean(lag_means)) if lag_means else None,
        "lag_max": max((int(r.get("lag/max", 0)) for r in rows), default=None),
        "groups": {"trained": trained,
                   "zero_advantage_dropped": sum(int(r.get("groups/zero_adv_dropped", 0)) for r in rows),
                   "stale_dropped": sum(int(r.get("groups/stale_dropped", 0)) for r in rows),
                   "stale_responses_dropped": sum(int(r.get("lag/stale_dropped", 0)) for r in rows)},
        "guard": guard_summary(rows),
        "prime": prime_summary(rows),
        "code_isolation": None if code_isolation is None else list(code_isolation),
        "files": {name: str(run_path / name) for name in
                  ("config.json", "metrics.jsonl", "summary.json", "checkpoints", "logs", "redis")},
    }


def summary_scalars(s: dict) -> dict[str, float]:
    """The summary's numbers for a tracker's run summary: first/last pairs as ``name/first`` and
    ``name/last``, counts as ``groups/<kind>``."""
    out: dict[str, float] = {"steps": float(s["steps"]), "seconds": float(s["seconds"])}
    for key in ("accuracy", "train_accuracy", "entropy", "length"):
        if s.get(key):
            out[f"{key}/first"], out[f"{key}/last"] = map(float, s[key])
    for key in ("lag_mean", "lag_max"):
        if s.get(key) is not None:
            out[key] = float(s[key])
    out.update({f"groups/{k}": float(v) for k, v in s["groups"].items()})
    return out


def _guard_lines(guard: dict | None) -> list[str]:
    if guard is None:
        return []
    lines = [f"  lag guard     {guard['fallbacks']} fallback(s) to on-policy, {guard['recoveries']} return(s); "
             f"{guard['on_policy_steps']} steps on-policy"]
    lines += [f"                {e['message'].removeprefix('[guard] ')}" for e in guard["events"]]
    return lines


def _prime_lines(p: dict | None) -> list[str]:
    if p is None:
        return []
    return [f"  PRIME PRM     held-out pairwise accuracy mean {p['prm_pairwise_accuracy_mean']:.3f}, sign accuracy "
            f"mean {p['prm_accuracy_mean']:.3f} (after its first update); {p['filtered_groups']} groups filtered "
            f"({p['filtered_frac_mean']:.0%} of those judged)"]


def format_summary(s: dict) -> str:
    """The summary as the lines a person reads at the end of a run."""
    def arrow(pair: list[float] | None, fmt: str = ".3f") -> str:
        return "-" if pair is None else f"{pair[0]:{fmt}} -> {pair[1]:{fmt}}"

    minutes, secs = divmod(int(round(s["seconds"])), 60)
    g = s["groups"]
    lag = "-" if s["lag_mean"] is None else f"mean {s['lag_mean']:.2f}, max {s['lag_max']}"
    evaluated = (f"avg@{s['eval_n']} on {s['eval_problems']} held-out problems" if s["accuracy"]
                 else "no evaluation")
    lines = [
        f"run {s['run_id']} ({s['preset']}): {s['steps']}/{s['steps_total']} steps in {minutes} min {secs} s "
        f"({s['stop_reason']})",
        f"  accuracy      {arrow(s['accuracy'])} ({evaluated})",
        f"  train reward  accuracy {arrow(s['train_accuracy'])}, response length {arrow(s['length'], '.1f')} tokens",
        f"  entropy       {arrow(s['entropy'])}",
        f"  policy lag    {lag}",
        f"  groups        {g['trained']} trained, {g['zero_advantage_dropped']} zero-advantage dropped, "
        f"{g['stale_dropped']} stale dropped ({g['stale_responses_dropped']} stale responses)",
        *_guard_lines(s.get("guard")),
        *_prime_lines(s.get("prime")),
        *([f"  code sandbox  {', '.join(s['code_isolation'])}"] if s.get("code_isolation") else []),
        f"  files         {s['run_path']}/ (config.json, metrics.jsonl, summary.json, checkpoints/, logs/, redis/)",
        f"  notebook      LAGRL_RUN_DIR={s['run_path']} jupyter notebook notebooks/monitor.ipynb",
    ]
    return "\n".join(lines)
