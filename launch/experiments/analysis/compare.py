"""Runs side by side: their metrics as frames, the comparison figure and CSV, the comparison CLI.

    python -m launch.experiments.analysis.compare --redis-url redis://:PASSWORD@127.0.0.1:PORT/0 --runs RUN_A RUN_B --out cmp/
    python -m launch.experiments.analysis.compare --metrics-jsonl runs/RUN_A/metrics.jsonl runs/RUN_B/metrics.jsonl --out cmp/

Writes ``cmp/compare.png`` (entropy/mean, and reward/accuracy with eval accuracy when present, vs
step; one line per run, labelled ``run_id (preset)``) and ``cmp/compare.csv`` (long format: run,
step, metric, value; every numeric scalar metric of every row), then prints both paths. When the
evaluation rows carry ``eval/pass@{k}`` it also writes ``cmp/pass_at_k.png`` (one pass@k curve per
evaluated checkpoint, ``launch.experiments.analysis.pass_at_k_plot``) and prints its path third. With
``--metrics-jsonl``, evaluation rows come from ``summary.json`` beside the file when the JSONL has none.

The panels themselves are ``launch.experiments.analysis.plots``. pandas and matplotlib are imported inside the
functions so ``--help`` stays instant.

The figures also go to the experiment trackers (``--tracking``, default tensorboard: ``<out>/tb``;
``wandb``, ``mlflow`` as for a run, ``launch.run.tracking``) as images of one tracker run named
``--run-name`` (default ``compare-<date>-<time>``), beside the runs they compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from buffer.keys import RunKeys
from buffer.monitor import TOKENIZER_META_KEYS, Monitor, list_runs, read_only_client
from launch.config.install_check import require_own_packages
from launch.config.redact import redact
from launch.config.tracking import TrackingConfig
from launch.experiments.analysis.pass_at_k_plot import write_pass_at_k
from launch.experiments.analysis.plots import ENTROPY_KEYS, EVAL_KEYS, STEP, draw_line, finish_panel
from launch.run.summary import read_run_rows
from launch.run.tracking import open_trackers

if TYPE_CHECKING:
    import pandas as pd

COMPARE_PANELS = (("entropy/mean", ENTROPY_KEYS), ("reward/accuracy", ("reward/accuracy",) + EVAL_KEYS))


# ---------------------------------------------------------------- loading
def jsonl_label(path: str | Path) -> str:
    """``run_id (preset)`` for ``<run_dir>/metrics.jsonl`` when a saved config names them, else the dir name."""
    path = Path(path)
    run_dir = path.parent if path.name == "metrics.jsonl" else None
    if run_dir is None:
        return path.stem
    for name in ("config.json", "run_config.json", "resolved_config.json"):
        try:
            cfg = json.loads((run_dir / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cfg, dict):
            return _label(str(cfg.get("run_id") or run_dir.name), cfg.get("preset"))
    return run_dir.name


def _label(run_id: str, preset: Any) -> str:
    return f"{run_id} ({preset})" if preset and str(preset) != run_id else run_id


def metrics_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per metrics entry, sorted by step; dict-valued metrics (``lag/hist``) stay objects.

    Scalars are made numeric where they can be (msgpack/JSON None -> NaN); the ``schema`` stamp and
    a stream entry ``id`` are kept out of the metrics.
    """
    import pandas as pd

    df = pd.DataFrame([{k: v for k, v in row.items() if k != "schema"} for row in rows])
    if df.empty:
        return pd.DataFrame({STEP: pd.Series(dtype=float)})
    for col in df.columns:
        if col in ("mode", "id") or df[col].map(lambda v: isinstance(v, (dict, list))).any():
            continue
        converted = pd.to_numeric(df[col], errors="coerce")
        if converted.notna().sum() >= df[col].notna().sum():   # only when nothing numeric-looking was lost
            df[col] = converted
    if STEP not in df.columns:
        df[STEP] = range(len(df))
    df[STEP] = pd.to_numeric(df[STEP], errors="coerce")
    return df.sort_values(STEP, kind="stable").reset_index(drop=True)


def numeric_metrics(df: pd.DataFrame) -> list[str]:
    """Columns holding numeric scalar metrics (not step, not dicts or strings)."""
    import pandas as pd

    return [c for c in df.columns if c != STEP and pd.api.types.is_numeric_dtype(df[c])
            and not pd.api.types.is_bool_dtype(df[c])]


def long_frame(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """``run, step, metric, value`` for every numeric scalar metric of every run (NaNs dropped)."""
    import pandas as pd

    parts = []
    for run, df in frames.items():
        cols = numeric_metrics(df)
        if not cols or df.empty:
            continue
        part = df[[STEP] + cols].melt(id_vars=STEP, var_name="metric", value_name="value").dropna()
        part.insert(0, "run", run)
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=["run", STEP, "metric", "value"])
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["run", "metric", STEP], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- samples
class _IdsOnly:
    """Stands in for a tokenizer that cannot be loaded here: responses are shown as token ids."""

    def decode(self, ids, skip_special_tokens: bool = False) -> None:
        return None


def sample_rows(mon, n_groups: int = 3, max_chars: int = 300) -> list[dict[str, Any]]:
    """The best- and worst-rewarded response of each of the ``n_groups`` newest groups, as text.

    ``mon`` is a :class:`buffer.monitor.Monitor`; if the tokenizer named in the run's meta cannot
    be loaded on this machine, responses are shown as (the first 32) token ids instead.
    """
    meta = mon.meta()
    path = next((str(meta[k]) for k in TOKENIZER_META_KEYS if meta.get(k)), None)
    tokenizer = None                       # the monitor loads the meta's tokenizer
    if path and path.startswith(("/", ".", "~")) and not Path(path).expanduser().exists():
        print(f"note: tokenizer {path} is not on this machine; showing token ids")
        tokenizer = _IdsOnly()             # a local path elsewhere: do not try (nor import transformers)
    try:
        groups = mon.recent_groups(n_groups, tokenizer=tokenizer)
    except Exception as exc:  # unloadable tokenizer files, a hub id without network, ...
        print(f"note: tokenizer unavailable ({type(exc).__name__}: {exc}); showing token ids")
        groups = mon.recent_groups(n_groups, tokenizer=_IdsOnly())
    rows = []
    for g in groups:
        ranked = sorted(g["responses"], key=lambda r: r["reward"], reverse=True)
        for r in ranked[:1] + ranked[1:][-1:]:
            text = r["text"] if r["text"] is not None else str(r["token_ids"][:32].tolist())
            prompt = g["prompt"] if g["prompt"] is not None else str(g["prompt_ids"][:32].tolist())
            rows.append({"step": g["step"], "actor": g["actor_id"], "prompt": prompt[-max_chars:],
                         "answer": g["answer"][:max_chars], "response": text[:max_chars],
                         "reward": r["reward"], "finish": r["finish_reason"], "length": r["length"],
                         "version": r["version_start"]})
    return rows


# ---------------------------------------------------------------- comparison
def plot_compare(frames: dict[str, pd.DataFrame], axes=None):
    """Two panels (entropy/mean; reward/accuracy + eval accuracy) with one line per run."""
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    else:
        fig = axes[0].figure
    for ax, (title, keys) in zip(axes, COMPARE_PANELS):
        drawn = sum(draw_line(ax, df, key, color=f"C{i % 10}", label=run if key == keys[0] else f"{run}: {key}")
                    for i, (run, df) in enumerate(frames.items()) for key in keys)
        finish_panel(ax, title + (" (dashed: eval)" if len(keys) > 1 else ""), drawn, keys, size=10)
    fig.tight_layout()
    return fig


def write_compare(frames: dict[str, pd.DataFrame], out_dir: str | Path) -> tuple[Path, Path]:
    """``out_dir/compare.png`` and ``out_dir/compare.csv`` for the given runs."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, csv = out_dir / "compare.png", out_dir / "compare.csv"
    fig = plot_compare(frames)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    long_frame(frames).to_csv(csv, index=False)
    return png, csv


def figures_to_trackers(tracking, name: str, out_dir: str | Path, figures: dict[str, Path], *,
                        store_root: str | Path | None = None, hparams: dict | None = None, log=print) -> list[str]:
    """Log each figure (tag -> PNG) as an image of the tracker run ``name``; returns the backends used.
    ``tracking``: a ``launch.run.tracking.TrackingConfig``; TensorBoard writes ``out_dir/tb``, a default
    MLflow file store is ``store_root/mlruns`` (default ``out_dir``)."""
    if not tracking.backends or not figures:
        return []
    trackers = open_trackers(tracking, name=name, log_dir=out_dir, store_root=store_root or out_dir,
                             hparams=hparams or {}, log=log)
    try:
        for tag, png in figures.items():
            trackers.log_image(tag, png, 0)
        return trackers.names
    finally:
        trackers.close()


def newest_run(url: str) -> str:
    """The run on the server that was written to last (newest metrics/groups/prompts entry id)."""
    client = read_only_client(url)
    runs = list_runs(client)
    if not runs:
        raise LookupError(f"no runs on {redact(url)}")

    def last_ms(run_id: str) -> int:
        keys = RunKeys(run_id)
        last = (client.xrevrange(k, count=1) for k in (keys.metrics, keys.groups, keys.prompts))
        ids = [entries[0][0] for entries in last if entries]
        return max((int(i.split(b"-")[0]) for i in ids), default=0)

    return max(runs, key=lambda r: (last_ms(r), r))


def frames_from_redis(url: str, run_ids: list[str]) -> dict[str, pd.DataFrame]:
    """Metrics of each run from a (live or finished) buffer, labelled ``run_id (preset)``."""
    frames = {}
    for run_id in run_ids:
        mon = Monitor(url, run_id)
        meta = mon.meta()
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        frames[_label(run_id, meta.get("preset") or config.get("preset"))] = metrics_frame(mon.metrics())
    return frames


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--runs", nargs="+", metavar="RUN_ID", help="run ids on --redis-url")
    src.add_argument("--metrics-jsonl", nargs="+", type=Path, metavar="FILE",
                     help="per-run metrics files (<run_dir>/metrics.jsonl)")
    ap.add_argument("--redis-url", help="buffer URL (with --runs); default: $LAGRL_REDIS_URL or $REDIS_URL")
    ap.add_argument("--labels", nargs="+", help="legend labels, one per run (default: run id (preset))")
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--tracking", default="tensorboard", metavar="LIST",
                    help="trackers that get the figures too: any of tensorboard,wandb,mlflow, or none")
    ap.add_argument("--tracking-project", default="lagrl", help="W&B project / MLflow experiment")
    ap.add_argument("--run-name", default=None, help="the tracker run's name (default compare-<date>-<time>)")
    args = ap.parse_args(argv)
    try:
        tracking = TrackingConfig.model_validate({"backends": TrackingConfig.model_validate(args.tracking).backends,
                                                  "project": args.tracking_project})
    except ValueError as exc:
        ap.error(f"--tracking: {exc}")
    require_own_packages()

    import matplotlib

    matplotlib.use("Agg")
    if args.runs:
        import os

        url = args.redis_url or os.environ.get("LAGRL_REDIS_URL") or os.environ.get("REDIS_URL")
        if not url:
            ap.error("--runs needs --redis-url (or LAGRL_REDIS_URL / REDIS_URL)")
        frames = frames_from_redis(url, args.runs)
    else:
        frames = {}
        for path in args.metrics_jsonl:
            if not path.is_file():
                ap.error(f"--metrics-jsonl: {path}: no such file")
            label = jsonl_label(path)
            while label in frames:
                label += "'"
            frames[label] = metrics_frame(read_run_rows(path))
    if args.labels:
        if len(args.labels) != len(frames):
            ap.error(f"--labels: {len(args.labels)} labels for {len(frames)} runs")
        frames = dict(zip(args.labels, frames.values()))
    for label, df in frames.items():
        if df.empty:
            print(f"warning: run {label!r} has no metrics rows", file=sys.stderr)
    png, csv = write_compare(frames, args.out)
    print(png)
    print(csv)
    curves = write_pass_at_k(frames, args.out)
    if curves is not None:
        print(curves)
    import time

    figures = {"compare": png, **({"pass_at_k": curves} if curves is not None else {})}
    figures_to_trackers(tracking, args.run_name or time.strftime("compare-%Y%m%d-%H%M%S"), args.out, figures,
                        hparams={"runs": list(frames)}, log=lambda line: print(line, file=sys.stderr))


if __name__ == "__main__":
    main()
