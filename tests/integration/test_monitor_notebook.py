"""notebooks/monitor.ipynb executes headless against a real buffer and draws every figure.

A synthetic run is written through RunBuffer into an embedded redis-server (10 metrics rows, a few
groups encoded with the tiny world's tokenizer, two actor heartbeats); the notebook runs with
nbclient on a kernel spec pointing at this interpreter (works from a fresh clone with only the
venv: nothing is registered in the user's Jupyter dirs).

Against a real training run (skipped unless set):

    LAGRL_MONITOR_RUN_DIR=runs/<run_id> pytest -m integration tests/integration/test_monitor_notebook.py
    # or LAGRL_MONITOR_REDIS_URL=redis://:PW@127.0.0.1:PORT/0 [LAGRL_MONITOR_RUN_ID=<run_id>]
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from buffer.messages import Group, Response
from buffer.server import EmbeddedRedis
from buffer.streams import RunBuffer
from tests.integration.harness import MONITOR_PNGS as PNGS
from tests.integration.harness import png_count, run_notebook

pytestmark = pytest.mark.integration

RUN_ID = "tiny-monitor-test"
FIGURES = ("entropy", "reward", "length", "clip", "lag_hist", "lag", "lagbucket_entropy", "lagbucket_clip",
           "lagbucket_ratio", "lagbucket_kl", "actors", "trained", "step_path", "samples")


def _metrics_row(step: int, rng: np.random.Generator) -> dict:
    acc = min(1.0, 0.25 + 0.04 * step + rng.uniform(-0.03, 0.03))
    row = {
        "step": step, "version": step + 1, "mode": "off_policy",
        "entropy/mean": 0.6 - 0.03 * step, "entropy/coef": 1e-4 * max(0, step - 4),
        "reward/mean": acc, "reward/accuracy": acc, "length/mean": 9.0 + step * 0.2, "length/max": 16,
        "truncation/rate": 0.05, "groups/zero_adv_dropped": int(rng.integers(0, 3)),
        "lag/hist": {0: 40, 1: 20 + step, 2: 4}, "lag/mean": 0.6, "lag/max": 2, "lag/stale_dropped": 0,
        "clip/low_frac": 0.01, "clip/high_frac": 0.02 + 0.001 * step, "ratio/mean": 1.0, "ratio/max": 1.4,
        "grad/norm": np.float32(0.8), "lr": 1e-6, "tokens/trained_per_s": 900.0 + 10 * step,
        "time/wait_data": 0.2, "time/train": 1.1, "time/weight_sync": 0.05,
        "path/seg/publish": 0.02, "path/seg/load": 0.05, "path/seg/issue": 0.0, "path/seg/take": 0.01,
        "path/seg/start": 0.0, "path/seg/generate": 0.6, "path/seg/score": 0.05, "path/seg/write": 0.01,
        "path/seg/read": 0.02, "path/seg/train": 1.1,
    }
    for bucket, ent in (("0", 0.6), ("1", 0.55), ("2-3", 0.5)):          # every bucket's metrics, as logged
        row |= {f"lagbucket/{bucket}/entropy/mean": ent - 0.03 * step, f"lagbucket/{bucket}/tokens": 100.0,
                f"lagbucket/{bucket}/clip/low_frac": 0.01, f"lagbucket/{bucket}/clip/high_frac": 0.02,
                f"lagbucket/{bucket}/ratio/mean": 1.0, f"lagbucket/{bucket}/ratio/max": 1.3,
                f"lagbucket/{bucket}/mismatch/kl_k3": 0.001 * (1 + step)}
    if step % 5 == 4:
        row["eval/accuracy"] = acc - 0.05
    return row


def _group(tok, i: int, actor_id: str, version: int) -> Group:
    a, b = 3 + i, 30 + 2 * i
    answers = [a + b, a + b, a + b + 1, a - b]
    responses = []
    for k, ans in enumerate(answers):
        ids = np.asarray(tok.encode(f"\\boxed{{{ans}}}").ids, dtype=np.int32)
        responses.append(Response(token_ids=ids, logprobs=np.full(ids.shape, -0.5, np.float32),
                                  finish_reason="stop", version_start=version, version_end=version,
                                  reward=float(ans == a + b),
                                  reward_info={"reason": "ok" if ans == a + b else "wrong"}))
    now = time.time()
    return Group(group_id=f"g{i}", prompt_id=f"g{i}", data_source="tiny_arith", step=i,
                 prompt_ids=np.asarray(tok.encode(f"Q: {a}+{b}\nA: ").ids, dtype=np.int32), answer=str(a + b),
                 responses=responses, actor_id=actor_id, created_at=now - 1, finished_at=now)


def test_monitor_notebook_synthetic_run(tmp_path: Path, tiny_world, kernel_env: str):
    from tokenizers import Tokenizer

    from launch.experiments.analysis import compare

    tok = Tokenizer.from_file(str(tiny_world.model_dir / "tokenizer.json"))
    rng = np.random.default_rng(0)
    with EmbeddedRedis(tmp_path / "run", appendfsync="no") as server:
        with RunBuffer.from_url(server.url, "older-run") as old:      # a second run on the server
            old.set_meta(preset="baseline")
            old.write_metrics({"step": 0, "entropy/mean": 0.5})
        with RunBuffer.from_url(server.url, RUN_ID) as buf:
            buf.set_meta(tokenizer_path=str(tiny_world.model_dir), preset="offpolicy_reuse4")
            for i in range(4):
                assert buf.put_group(_group(tok, i, f"actor-{i % 2}", version=i))
            for step in range(10):
                buf.write_metrics(_metrics_row(step, rng))
            buf.publish_version(10, "synthetic://weights/10")
            for k, tps in enumerate((1500.0, 1100.0)):
                buf.heartbeat(f"actor-{k}", {"version": 9, "prompts_done": 20 + k, "tokens_per_s": tps,
                                             "in_flight": 2, "last_error": None})
            assert compare.newest_run(server.url) == RUN_ID
            before = buf.client.dbsize(), buf.client.xlen(buf.keys.metrics), buf.client.xlen(buf.keys.groups)

            t0 = time.monotonic()
            nb, summary = run_notebook(kernel_env, {"LAGRL_REDIS_URL": server.url, "LAGRL_RUN_ID": RUN_ID})
            elapsed = time.monotonic() - t0

            after = buf.client.dbsize(), buf.client.xlen(buf.keys.metrics), buf.client.xlen(buf.keys.groups)
    assert after == before, "the monitor must not write"
    assert summary["run_id"] == RUN_ID and summary["rows"] == 10
    assert all(summary[f] > 0 for f in FIGURES), summary
    assert summary["entropy"] == 20 and summary["reward"] == 10 * 2 + 2   # + 2 eval points
    assert summary["lag_hist"] == 3 and summary["actors"] == 2 and summary["samples"] == 3 * 2
    assert summary["step_path"] == 10                                     # one stacked bar per step
    # 3 buckets x 10 steps, per metric drawn: entropy 1, clip 2 (high, low), ratio 2 (mean, max), kl 1
    assert [summary[f"lagbucket_{f}"] for f in ("entropy", "clip", "ratio", "kl")] == [30, 60, 60, 30]
    assert png_count(nb) == PNGS
    html = "".join(o.get("data", {}).get("text/html", "") + o.get("data", {}).get("text/plain", "")
                   for c in nb.cells for o in c.get("outputs", [])
                   if o.output_type in ("display_data", "execute_result"))
    assert "Q: 6+36" in html and "\\boxed{42}" in html and "\\boxed{-30}" in html  # newest group: best, worst
    assert elapsed < 120, f"notebook took {elapsed:.0f} s"


def test_monitor_notebook_bare_run(tmp_path: Path, kernel_env: str):
    """A run that has logged almost nothing, with a tokenizer path from another machine: no crash."""
    from bench.synthetic import make_group

    with EmbeddedRedis(tmp_path / "run", appendfsync="no") as server:
        with RunBuffer.from_url(server.url, RUN_ID) as buf:
            buf.set_meta(tokenizer_path=str(tmp_path / "elsewhere" / "model"))
            buf.put_group(make_group("g0", n=3))
            buf.write_metrics({"step": 0, "mode": "on_policy", "reward/mean": 0.25, "lag/hist": [8, 0, 1]})
        nb, summary = run_notebook(kernel_env, {"LAGRL_REDIS_URL": server.url})   # RUN_ID: the only run
    assert summary == {"run_id": RUN_ID, "rows": 1, "entropy": 0, "reward": 1, "length": 0, "clip": 0,
                       "lag_hist": 2, "lag": 0, "lagbucket_entropy": 0, "lagbucket_clip": 0, "lagbucket_ratio": 0,
                       "lagbucket_kl": 0, "actors": 0, "trained": 0, "step_path": 0, "samples": 2}
    assert png_count(nb) == PNGS
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert "is not on this machine; showing token ids" in text


def test_monitor_notebook_on_a_finished_run_dir(tmp_path: Path, kernel_env: str):
    """LAGRL_RUN_DIR of a finished run, no server running: the notebook starts the run's redis-server
    from its AOF, says so, and stops it at the end; a live server is attached to and left running."""
    import psutil

    run_dir = tmp_path / "run"
    rng = np.random.default_rng(2)
    with EmbeddedRedis(run_dir, appendfsync="always") as server:
        with RunBuffer.from_url(server.url, RUN_ID) as buf:
            for step in range(5):
                buf.write_metrics(_metrics_row(step, rng))
        first_pid = server.pid
    assert not psutil.pid_exists(first_pid)                           # the run is over

    nb, summary = run_notebook(kernel_env, {"LAGRL_RUN_DIR": str(run_dir)})
    assert summary["run_id"] == RUN_ID and summary["rows"] == 5 and summary["entropy"] == 10
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert "started the finished run's redis-server from its AOF" in text, text[:2000]
    assert "stopped the redis-server started for this finished run" in text
    restarted = json.loads((run_dir / "redis.json").read_text())
    assert restarted["pid"] is None                                   # stopped cleanly, pid cleared

    with EmbeddedRedis(run_dir, appendfsync="no") as live:            # a run still training
        nb, summary = run_notebook(kernel_env, {"LAGRL_RUN_DIR": str(run_dir)})
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
        assert f"attached to the run's live redis-server (pid {live.pid})" in text
        assert summary["rows"] == 5 and live.ping()                   # left running for its driver


def test_compare_cli_from_redis(tmp_path: Path, capsys: pytest.CaptureFixture):
    """``python -m launch.experiments.analysis.compare --redis-url URL --runs A B``: labels carry the preset from meta."""
    import csv

    from launch.experiments.analysis import compare

    rng = np.random.default_rng(1)
    with EmbeddedRedis(tmp_path / "run", appendfsync="no") as server:
        for run_id, preset, steps in (("run-a", "onpolicy", 6), ("run-b", "offpolicy_reuse4", 4)):
            with RunBuffer.from_url(server.url, run_id) as buf:
                buf.set_meta(preset=preset)
                for step in range(steps):
                    buf.write_metrics(_metrics_row(step, rng))
        compare.main(["--redis-url", server.url, "--runs", "run-a", "run-b", "--out", str(tmp_path / "cmp")])
    out = tmp_path / "cmp"
    assert capsys.readouterr().out.split() == [str(out / "compare.png"), str(out / "compare.csv")]
    with open(tmp_path / "cmp" / "compare.csv") as f:
        rows = list(csv.DictReader(f))
    ent = {(r["run"], int(float(r["step"]))) for r in rows if r["metric"] == "entropy/mean"}
    assert ent == {("run-a (onpolicy)", s) for s in range(6)} | {("run-b (offpolicy_reuse4)", s) for s in range(4)}
    assert sum(r["metric"] == "eval/accuracy" for r in rows) == 1                 # run-a step 4


@pytest.mark.skipif(not (os.environ.get("LAGRL_MONITOR_REDIS_URL") or os.environ.get("LAGRL_MONITOR_RUN_DIR")),
                    reason="set LAGRL_MONITOR_REDIS_URL or LAGRL_MONITOR_RUN_DIR to check a real run")
def test_monitor_notebook_real_run(kernel_env: str):
    env = {"LAGRL_REDIS_URL": os.environ.get("LAGRL_MONITOR_REDIS_URL", ""),
           "LAGRL_RUN_DIR": os.environ.get("LAGRL_MONITOR_RUN_DIR", ""),
           "LAGRL_RUN_ID": os.environ.get("LAGRL_MONITOR_RUN_ID", "")}
    nb, summary = run_notebook(kernel_env, {k: v for k, v in env.items() if v})
    assert summary["rows"] > 0, summary
    assert summary["entropy"] > 0 and summary["reward"] > 0, summary
    assert png_count(nb) == PNGS
