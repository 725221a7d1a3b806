"""launch.experiments.science.jobs and job_entry: what a run asks of the cluster, how many fit, how a run's
files travel back through its job's log, and the runner's bookkeeping (retries bounded, every attempt in
the log, stopped jobs on an error). The job server here is a stand-in with the JobSubmissionClient's
methods the runner calls; the real one runs in tests/integration/test_science_cluster.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.job_submission import JobStatus

from launch.experiments.science import jobs as jobs_mod
from launch.experiments.science.job_entry import REPORT_FILES, parse_results, results_block
from launch.experiments.science.jobs import JobRunner, eta_text, fits_at_once, fits_whole, run_needs
from launch.run.spec import RunSpec


def _cfg(num_actors=1, actor_cpus=1.0, actor_gpus=0.0, tp=1, ranks=1, rank_cpus=1.0, rank_gpus=0.0,
         device="cpu", workers=2, worker_cpus=0.5):
    return SimpleNamespace(
        actors=SimpleNamespace(num_actors=num_actors, num_cpus=actor_cpus, num_gpus=actor_gpus,
                               tensor_parallel_size=tp),
        learner=SimpleNamespace(num_ranks=ranks, cpus_per_rank=rank_cpus, gpus_per_rank=rank_gpus, device=device),
        rewards=SimpleNamespace(num_workers=workers, worker_num_cpus=worker_cpus))


def test_run_needs_adds_driver_engines_learner_and_workers():
    assert run_needs(_cfg()) == {"cpus": 1 + 1 + 1 + 2 * 0.5, "gpus": 0.0}
    # two engines of TP 2 on a GPU each, a 2-rank CUDA learner: 2*1*2 + 2*1 GPUs
    needs = run_needs(_cfg(num_actors=2, actor_gpus=1.0, tp=2, ranks=2, rank_gpus=1.0, device="cuda", workers=4))
    assert needs == {"cpus": 1 + 2 + 2 + 4 * 0.5, "gpus": 6.0}
    # a CPU learner asks no GPU whatever gpus_per_rank says
    assert run_needs(_cfg(rank_gpus=1.0))["gpus"] == 0.0


def test_fits_at_once_is_the_scarcest_resource_and_at_least_one():
    assert fits_at_once({"cpus": 4.0, "gpus": 0.0}, {"CPU": 16.0}) == 4
    assert fits_at_once({"cpus": 4.0, "gpus": 0.0}, {"CPU": 15.9}) == 3
    assert fits_at_once({"cpus": 4.0, "gpus": 2.0}, {"CPU": 64.0, "GPU": 8.0}) == 4
    assert fits_at_once({"cpus": 4.0, "gpus": 2.0}, {"CPU": 64.0}) == 1     # no GPU: one run waits for itself
    assert fits_at_once({"cpus": 3.0, "gpus": 0.0}, {"CPU": 9.0}) == 3        # exact, despite float sums
    assert fits_whole({"cpus": 3.25, "gpus": 0.0}, {"CPU": 4.0}) and not fits_whole({"cpus": 3.25, "gpus": 1.0},
                                                                                  {"CPU": 4.0})


def test_results_travel_through_the_log_and_the_last_block_wins(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"steps": 3}))
    (run / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    (run / "unrelated.bin").write_text("not for the report")
    (run / "config.json").write_text(json.dumps({"buffer": {"redis_url": "redis://:hunter2@10.0.0.5:6379/0"},
                                                 "learner": {"lr": 1e-4}}))
    block = results_block(run)
    log = "[driver] started\n" + results_block(tmp_path) + "\n[eval] ...\n" + block + "\n(ray: job finished)\n"
    files = parse_results(log)
    config = json.loads(files.pop("config.json"))
    assert files == {"summary.json": '{"steps": 3}', "metrics.jsonl": '{"step": 0}\n{"step": 1}\n'}
    assert "hunter2" not in str(config) and config["learner"]["lr"] == 1e-4      # the password stays on the node
    assert set(files) <= set(REPORT_FILES)
    assert parse_results("[driver] started\n[lagrl-results] begin\nabc") is None      # cut short: no end
    assert parse_results("") is None


def test_eta_by_steps():
    assert eta_text(0.0, 0, 100).endswith("so far")
    import time
    t0 = time.monotonic() - 60.0
    text = eta_text(t0, 25, 100)           # a minute for 25 steps: 3 minutes for the 75 left
    assert text.startswith("1.0 min so far") and "ETA 3.0 min" in text


class FakeJobServer:
    """The JobSubmissionClient methods the runner calls; each job's outcome comes from ``script``:
    run key -> list of outcomes for attempts 1, 2, ... ("ok" prints a results block, "fail" fails)."""

    def __init__(self, script: dict[str, list[str]], run_dir: Path):
        self.script, self.run_dir = script, run_dir
        self.jobs: dict[str, dict] = {}
        self.stopped: list[str] = []
        self.submitted: list[str] = []
        self.read_on_node: list[str] = []

    def submit_job(self, *, entrypoint, submission_id, runtime_env, entrypoint_num_cpus, metadata):
        assert "job_entry --spec" in entrypoint and entrypoint_num_cpus == jobs_mod.DRIVER_CPUS
        assert runtime_env["env_vars"]["LAGRL_SHARED_EVAL"].startswith("lagrl-report-")
        key = metadata["lagrl_run"]
        attempt = sum(1 for j in self.jobs.values() if j["key"] == key)
        outcome = self.script[key][attempt]
        self.jobs[submission_id] = {"key": key, "outcome": outcome, "polls": 0}
        self.submitted.append(submission_id)
        return submission_id

    def get_job_info(self, job_id):
        job = self.jobs[job_id]
        job["polls"] += 1
        if job["outcome"] == "hang" or job["polls"] < 2:
            status = JobStatus.RUNNING
        else:
            status = JobStatus.SUCCEEDED if job["outcome"] == "ok" else JobStatus.FAILED
        return SimpleNamespace(status=status, driver_node_id="abcdef0123456789", start_time=1000, end_time=4000,
                               message="the node died" if job["outcome"] == "fail" else "")

    def get_job_logs(self, job_id):
        job = self.jobs[job_id]
        run = self.run_dir / job["key"]
        run.mkdir(parents=True, exist_ok=True)
        (run / "summary.json").write_text(json.dumps({"run": job["key"]}))
        (run / "metrics.jsonl").write_text('{"step": 0, "entropy/mean": 0.4}\n{"step": 1, "entropy/mean": 0.3}\n')
        (run / "evals.jsonl").write_text('{"step": 0, "eval/avg@n": 0.25}\n')
        return f"console of {job_id}\n" + (results_block(run) if job["outcome"] == "ok" else "Traceback ...")

    def _do_request(self, method, endpoint):
        """The state API's log endpoint, as a cluster's runner reads a job's log on its driver's node."""
        assert method == "GET" and endpoint.startswith("/api/v0/logs/file?node_id=abcdef0123456789&filename=job-driver-")
        job_id = endpoint.split("filename=job-driver-")[1].split(".log")[0]
        self.read_on_node.append(job_id)
        return SimpleNamespace(status_code=200, text=self.get_job_logs(job_id))

    def stop_job(self, job_id):
        self.stopped.append(job_id)


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs_mod, "POLL_S", 0.0)
    printed = []

    def start(script: dict[str, list[str]], retries: int = 2, max_concurrent: int = 2) -> JobRunner:
        server = FakeJobServer(script, tmp_path / "job-node")
        monkeypatch.setattr("ray.job_submission.JobSubmissionClient", lambda address, headers=None: server)
        r = JobRunner("http://127.0.0.1:1", tmp_path / "out", max_concurrent=max_concurrent, retries=retries, local=True,
                      live_every_s=0.0, log=lambda line, flush: printed.append(line))
        (tmp_path / "out").mkdir(exist_ok=True)
        r.server, r.printed = server, printed
        return r

    return start


def _specs(*names: str) -> list[RunSpec]:
    return [RunSpec(name, (), "tiny", 0, 2) for name in names]


def test_runs_come_back_into_the_report_dir(runner, tmp_path):
    specs = _specs("a", "b", "c")
    r = runner({s.key: ["ok"] for s in specs})
    results = r.run_all(specs)
    assert set(results) == {s.key for s in specs}
    for spec in specs:
        got = results[spec.key]
        assert got["error"] is None and got["attempts"] == 1 and got["seconds"] == 3.0   # the job's own times
        assert json.loads((tmp_path / "out" / "runs" / spec.key / "summary.json").read_text()) == {"run": spec.key}
        assert (tmp_path / "out" / "runs" / f"{spec.key}.log").read_text().startswith("console of")
    log = (tmp_path / "out" / "science.log").read_text()
    assert log.count(" done in ") == 3 and "on node abcdef01" in log and "running" in log


def test_failed_jobs_are_retried_within_the_bound_and_each_attempt_logged(runner, tmp_path):
    flaky, broken = _specs("flaky", "broken")
    r = runner({flaky.key: ["fail", "ok"], broken.key: ["fail", "fail", "fail"]}, retries=2)
    results = r.run_all([flaky, broken])
    assert results[flaky.key]["error"] is None and results[flaky.key]["attempts"] == 2
    assert "the node died" in results[broken.key]["error"]
    assert not (tmp_path / "out" / "runs" / broken.key / "summary.json").exists()     # not marked done
    assert sum(1 for j in r.server.submitted if broken.key in j) == 3                   # 1 + 2 retries, no more
    log = (tmp_path / "out" / "science.log").read_text()
    assert f"{flaky.key}: attempt 1 failed (job " in log and "attempt 2 of 3" in log
    assert f"{broken.key} FAILED" in log


def test_an_error_in_the_report_stops_its_jobs(runner, monkeypatch):
    a, b = _specs("a", "b")
    r = runner({a.key: ["hang"], b.key: ["hang"]})
    calls = {"n": 0}
    real = r.server.get_job_info

    def info_then_interrupt(job_id):
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt
        return real(job_id)

    r.server.get_job_info = info_then_interrupt
    with pytest.raises(KeyboardInterrupt):
        r.run_all([a, b])
    assert sorted(r.server.stopped) == sorted(r.server.submitted) and len(r.server.stopped) == 2
    assert not r.running


def test_an_ablation_on_a_cluster_reads_each_log_on_its_driver_node(tmp_path, monkeypatch):
    """launch.experiments.ablation --address: every preset a job; on a cluster (not the report's own head) each
    job's log is read on its driver's node, and each run comes back as a RunResult from its files (or its
    error). The cluster's resources cannot be read here: the runner says so once and goes on at --max-concurrent."""
    from launch.experiments import ablation

    monkeypatch.setattr(jobs_mod, "POLL_S", 0.0)
    specs = [RunSpec("onpolicy", (), "tiny", None, 2, run_id="abl-onpolicy"),
             RunSpec("offpolicy_reuse4", (), "tiny", None, 2, run_id="abl-reuse4")]
    server = FakeJobServer({specs[0].key: ["ok"], specs[1].key: ["fail"]}, tmp_path / "job-node")
    monkeypatch.setattr("ray.job_submission.JobSubmissionClient", lambda address, headers=None: server)
    monkeypatch.setattr(JobRunner, "cluster_resources", lambda self: (_ for _ in ()).throw(ConnectionError("no")))
    (tmp_path / "out").mkdir()
    good, bad = ablation._as_jobs(specs, tmp_path / "out", "http://127.0.0.1:1", max_concurrent=2, retries=0)
    assert good.run_id == "abl-onpolicy" and good.run_path == tmp_path / "out" / "runs" / "abl-onpolicy"
    assert [m["entropy/mean"] for m in good.metrics] == [0.4, 0.3] and good.evals == [{"step": 0, "eval/avg@n": 0.25}]
    assert good.seconds == 3.0 and isinstance(bad, str) and "the node died" in bad
    assert sorted(server.read_on_node) == sorted(server.submitted)          # each log, the failed one's too
    log = (tmp_path / "out" / "science.log").read_text()
    assert "could not be read (ConnectionError: no); still 2 at a time" in log
    assert log.count("could not be read") == 1           # asked at the start and at each job's end: said once


def test_a_cluster_short_of_a_whole_run_is_said_once_and_its_end_too(tmp_path, monkeypatch):
    """Asked at every job's end, the width is computed again; the warning that the live nodes hold no whole run
    (a run asks 2 CPUs here, the cluster has 1) is said when it starts to hold and when it ends, not each time."""
    monkeypatch.setattr("ray.job_submission.JobSubmissionClient", lambda address, headers=None: object())
    (tmp_path / "out").mkdir()
    r = JobRunner("http://127.0.0.1:1", tmp_path / "out")
    r._needs = {"cpus": 2.0, "gpus": 0.0}
    sizes = iter([1.0, 1.0, 1.0, 5.0, 5.0])
    monkeypatch.setattr(JobRunner, "cluster_resources", lambda self: {"CPU": next(sizes)})
    assert [r.width_now([], 1) for _ in range(5)] == [1, 1, 1, 2, 2]
    lines = (tmp_path / "out" / "science.log").read_text().splitlines()
    assert len(lines) == 2 and "do not hold one whole run (2 CPUs, 0 GPUs)" in lines[0]
    assert lines[1] == "[science] the cluster's live nodes hold a whole run again"
