"""The science report on a cluster: a 2-finding mini-report submitted through ``--address`` to a local
multi-node Ray cluster (tests/integration/cluster.py: a head with its job server and no CPU, so no run
lands on it, and two worker nodes of 4 CPUs, a run asking 3.25), one seed, two steps.

- the runs land on more than one node (the jobs' drivers over the report) and every run's files come back
  through its job's log (placement.json: engines and learner on the worker nodes);
- a worker node is killed (its process group SIGKILLed, raylet and all) while a run's driver is on it: the
  run is rerun (its attempt 1 failed, named in the report's log) and finishes on the node left;
- the report's CSV has the structure a local report's has (tests/integration/test_science_report.py):
  one row per check of each finding, the same columns.

    flock /tmp/lagrl-heavy.lock .venv/bin/python -m pytest -s -m slow tests/integration/test_science_cluster.py
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FINDINGS = ("reuse", "clip_higher")


def _wait_job_server(cluster: LocalCluster, timeout_s: float = 120.0):
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = JobSubmissionClient(cluster.dashboard)
            client.list_jobs()
            return client
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _a_started_run(client, cluster: LocalCluster, report: subprocess.Popen, timeout_s: float = 600.0) -> tuple[str, str]:
    """(job id, node name) of a job whose run has started (its driver's start-up line is in its log), once at
    least one run has finished: Ray places the drivers where it likes, so the node to kill is where one runs."""
    from launch.experiments.science.jobs import JobRunner

    names = {node_id: name for name, node_id in cluster.node_ids().items()}
    reader = JobRunner(cluster.dashboard, Path(tempfile.mkdtemp()))          # reads a log on its node
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert report.poll() is None, "the report ended before a run could be killed"
        jobs = client.list_jobs()
        if any(job.status == "SUCCEEDED" for job in jobs):
            for job in jobs:
                if job.status == "RUNNING" and job.driver_node_id and names.get(job.driver_node_id) != "head":
                    if "[driver] started in" in reader.job_log(job.submission_id, job.driver_node_id):
                        return job.submission_id, names[job.driver_node_id]
        time.sleep(2.0)
    raise TimeoutError(f"no run started within {timeout_s:.0f} s")


def test_mini_report_on_a_cluster_survives_a_dead_node(tmp_path, tiny_world, monkeypatch):
    from launch.experiments.science.findings import finding
    from launch.experiments.science.report import CSV_FIELDS

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    t0 = time.monotonic()
    cluster = LocalCluster.start(tmp_path, {"n1": {}, "n2": {}}, head_cpus=0, worker_cpus=4, dashboard=True)
    try:
        monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.env["RAY_AUTH_TOKEN"])
        client = _wait_job_server(cluster)
        print(f"[test] cluster {sorted(cluster.nodes)} with its job server up in {time.monotonic() - t0:.0f}s",
              flush=True)
        ids = cluster.node_ids()
        out = tmp_path / "science"
        argv = [sys.executable, "-m", "launch.experiments.science", "--address", cluster.dashboard,
                "--findings", *FINDINGS, "--seeds", "1", "--steps", "2", "--world", "tiny", "--out", str(out),
                "--cache", str(tiny_world.root.parent), "--retries", "2",
                "--override", "data.eval_max_problems=8", "--override", "data.eval_n=2"]
        console = tmp_path / "report.log"
        report = subprocess.Popen(argv, env=cluster.env, stdout=open(console, "w"), stderr=subprocess.STDOUT)
        try:
            victim, dead = _a_started_run(client, cluster, report)
            victim_key = client.get_job_info(victim).metadata["lagrl_run"]
            alive = ({"n1", "n2"} - {dead}).pop()
            cluster.nodes[dead].kill()
            print(f"[test] {dead} killed under {victim}", flush=True)
            assert report.wait(timeout=1500) == 0, console.read_text()[-4000:]
        finally:
            if report.poll() is None:
                report.kill()
        # where Ray placed each attempt's driver (the job's supervisor): on both worker nodes over the report
        driver_nodes = {job.driver_node_id for job in client.list_jobs()
                        if (job.submission_id or "").startswith("lagrl-report-")}
        log = (out / "science.log").read_text()
        print(log, flush=True)
    finally:
        cluster.stop()

    # the killed run: its first attempt failed, a later one finished on the node left
    assert f"{victim_key}: attempt 1 failed" in log
    assert re.search(rf"{re.escape(victim_key)} done in \d+ s on node {ids[alive][:8]}, attempt [23] ", log), log

    # every run back in the report's directory; the drivers on both worker nodes over the report, and each
    # run's engines and learner on a worker node (the head has no CPU). The driver process's own Ray node in
    # placement.json is not checked: on nodes sharing one IP a driver attaches to the first raylet there
    assert {ids["n1"], ids["n2"]} <= driver_nodes
    runs = sorted(p for p in (out / "runs").iterdir() if p.is_dir())
    assert len(runs) == 7   # the updates-per-batch factorial's four arms, clip-higher's three
    nodes = set()
    for run in runs:
        assert {"summary.json", "metrics.jsonl", "evals.jsonl", "placement.json"} <= {p.name for p in run.iterdir()}
        assert (run.parent / f"{run.name}.log").is_file()
        placement = json.loads((run / "placement.json").read_text())
        nodes |= {*(a["node_id"] for a in placement["actors"].values()), *(r["node_id"] for r in placement["learner"])}
    assert nodes and nodes <= {ids["n1"], ids["n2"]}

    # the CSV as a local report writes it
    with open(out / "report.csv") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        assert tuple(reader.fieldnames) == CSV_FIELDS
    assert [(r["finding"], r["statistic"]) for r in rows] == [
        (key, check.statistic) for key in FINDINGS for check in finding(key).checks]
    assert all(r["seeds"] in ("0", "1") for r in rows)
