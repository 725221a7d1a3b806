"""The science report's runs as Ray jobs, on a cluster (``--address``) or on one local Ray the report starts
for itself (``launch.experiments.science.local_head``): each run is submitted through Ray's job API,
Ray places it, and its results come back through the job's own log (``job_entry``: no shared filesystem).

    submit      ``python -m launch.experiments.science.job_entry --spec ...`` with the checkout as the job's
                working directory (uploaded once: Ray caches it by content), the run's driver declared as
                the job's entrypoint resources (one CPU: the run's actors ask for their own), the node's
                world cache (``LAGRL_CACHE``, built once per node) and the report's id for the shared step-0
                evaluation (``launch.run.evaluation``);
    at most     ``max_concurrent`` jobs at once: by default as many runs as the cluster's CPUs (and GPUs)
                hold at the resources one run asks (:func:`run_needs`), so no run waits half-placed;
    finished    its files written under ``<out>/runs/<run key>/`` and its console to ``<out>/runs/<key>.log``,
                as a local run's; one line per finished run, and every ``live_every_s`` a line for the
                whole report (done / running / left, the ETA from the steps left, where each running job's
                driver is), also appended to ``<out>/science.log``;
    failed      a job that fails, or whose node dies (its driver with it), is submitted again up to
                ``retries`` times, each attempt named in the log; then recorded as the run's error;
    stopped     the report stopped (Ctrl-C, SIGTERM, an error) stops every job it submitted.

A run whose ``summary.json`` is in ``<out>`` is done: rerunning the report resumes and reruns nothing
that finished (``runner.run_all`` decides what is left).
"""

from __future__ import annotations

import json
import math
import shlex
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from launch.experiments.science.job_entry import parse_results
from launch.run.spec import RunSpec

CHECKOUT = Path(__file__).resolve().parents[3]
# what of the checkout a job does not need (the virtualenv, caches, runs, git): the rest is uploaded once
UPLOAD_EXCLUDES = [".venv/", ".git/", ".cache/", "runs/", "**/__pycache__/", ".pytest_cache/", "bench/out/",
                   "*.safetensors"]
DRIVER_CPUS = 1.0          # a run's driver process (feeder, evaluator, summary): the job's entrypoint resources
POLL_S = 2.0
SUBMIT_WAIT_S = 120.0      # how long a submission the job server turns away "for now" is tried again
LOG_SETTLE_S = 20.0        # how long a succeeded job's log may take to show the results it printed last


def run_needs(cfg) -> dict[str, float]:
    """What one run asks of the cluster: its driver, engines, learner ranks and reward workers."""
    a, lr, rw = cfg.actors, cfg.learner, cfg.rewards
    workers = rw.num_workers or 1
    gpus = a.num_actors * a.num_gpus * a.tensor_parallel_size + (lr.num_ranks * lr.gpus_per_rank
                                                                   if lr.device == "cuda" else 0.0)
    return {"cpus": DRIVER_CPUS + a.num_actors * a.num_cpus + lr.num_ranks * lr.cpus_per_rank
            + workers * rw.worker_num_cpus, "gpus": gpus}


def largest_needs(specs: list[RunSpec]) -> dict[str, float]:
    """What the largest of ``specs`` asks (:func:`run_needs` of its resolved config)."""
    return max((run_needs(spec.config(Path("unused"))) for spec in specs), key=lambda n: n["cpus"])


def fits_at_once(needs: dict[str, float], cluster: dict[str, float]) -> int:
    """How many runs asking ``needs`` the cluster's total resources hold side by side (at least 1)."""
    counts = [cluster.get("CPU", 0.0) / needs["cpus"]]
    if needs["gpus"]:
        counts.append(cluster.get("GPU", 0.0) / needs["gpus"])
    return max(1, math.floor(min(counts) + 1e-9))


def fits_whole(needs: dict[str, float], cluster: dict[str, float]) -> bool:
    """Whether the cluster's totals hold one run asking ``needs``."""
    return cluster.get("CPU", 0.0) + 1e-9 >= needs["cpus"] and cluster.get("GPU", 0.0) + 1e-9 >= needs["gpus"]


WARNING_ENDS = {"short": "the cluster's live nodes hold a whole run again",
                "unread": "the cluster's resources can be read again"}


@dataclass
class Attempt:
    spec: RunSpec
    job_id: str
    number: int                      # 1 for the first submission
    started: float = field(default_factory=time.monotonic)
    node: str = ""                   # where the job's driver runs, once Ray says


class JobRunner:
    """Submits runs to the job server at ``address`` (``http://<head>:8265``) and collects them into ``out``."""

    def __init__(self, address: str, out: Path, *, max_concurrent: int | None = None, retries: int = 2,
                 cache_dir: str | None = None, live_every_s: float = 60.0, headers: dict | None = None,
                 local: bool = False, log=print):
        from ray.job_submission import JobSubmissionClient

        # headers: the cluster's token where this process's own Ray settings do not hold it (a local head)
        self.client = JobSubmissionClient(address, headers=headers)
        self.local = local            # the report's own head on this machine: one node
        self._needs: dict[str, float] | None = None
        self.address, self.out, self.retries, self.live_every_s = address, out, retries, live_every_s
        self.report_id = f"lagrl-report-{uuid.uuid4().hex[:12]}"
        self.cache_dir = cache_dir
        self.max_concurrent = max_concurrent
        self.running: dict[str, Attempt] = {}        # run key -> its current attempt
        self._warnings: dict[str, str] = {}           # a condition still holding -> the line said about it
        self._print = log
        self.log_path = out / "science.log"

    def say(self, line: str) -> None:
        self._print(line, flush=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    # -- submission --------------------------------------------------------------------------------------
    def runtime_env(self) -> dict:
        env = {"PYTHONUNBUFFERED": "1", "LAGRL_SHARED_EVAL": self.report_id}
        if self.cache_dir:
            env["LAGRL_CACHE"] = self.cache_dir
        return {"working_dir": str(CHECKOUT), "excludes": UPLOAD_EXCLUDES, "env_vars": env}

    def submit(self, spec: RunSpec, number: int) -> Attempt:
        spec_json = shlex.quote(json.dumps(asdict(spec)))     # job_entry builds the same RunSpec from it
        job_id = f"{self.report_id}-{spec.key}-a{number}"
        deadline = time.monotonic() + SUBMIT_WAIT_S
        while True:
            try:
                self.client.submit_job(
                    entrypoint=f"python -m launch.experiments.science.job_entry --spec {spec_json}",
                    submission_id=job_id, runtime_env=self.runtime_env(), entrypoint_num_cpus=DRIVER_CPUS,
                    metadata={"lagrl_run": spec.key})
                return Attempt(spec, job_id, number)
            except RuntimeError as exc:
                # a head whose job server answers before its node's agent has registered says so; wait for it
                if "try again later" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)

    def concurrency(self, specs: list[RunSpec]) -> int:
        """How many runs go at once, each asking what the largest of ``specs`` asks: on a cluster as many as
        its live nodes hold now (a node that died takes its share with it: two runs half-placed on what is
        left would wait for each other for ever), at most ``max_concurrent``; on the report's own head
        ``max_concurrent``."""
        if self.local and self.max_concurrent:
            return self.max_concurrent
        if self._needs is None:          # the runs' configs, resolved once
            self._needs = largest_needs(specs)
        cluster = self.cluster_resources()
        fits = fits_at_once(self._needs, cluster)
        short = fits == 1 and not fits_whole(self._needs, cluster)
        self._warn_while("short", short, f"[science] warning: the cluster's live nodes ({cluster.get('CPU', 0):g} "
                         f"CPUs, {cluster.get('GPU', 0):g} GPUs) do not hold one whole run ({self._needs['cpus']:g} "
                         f"CPUs, {self._needs['gpus']:g} GPUs): its job will wait until nodes join")
        return min(fits, self.max_concurrent) if self.max_concurrent else fits

    def _warn_while(self, what: str, holds: bool, line: str) -> None:
        """Say ``line`` when the condition ``what`` starts to hold or its line changes, not at every poll; say
        when it ends."""
        said = self._warnings.get(what)
        if holds and said != line:
            self.say(line)
            self._warnings[what] = line
        elif not holds and said is not None:
            del self._warnings[what]
            self.say(f"[science] {WARNING_ENDS[what]}")

    def width_now(self, specs: list[RunSpec], width: int) -> int:
        """:meth:`concurrency` now, or ``width`` as it was when the cluster cannot say (and the report goes on)."""
        try:
            width = self.concurrency(specs)
        except Exception as exc:
            self._warn_while("unread", True, f"[science] the cluster's resources could not be read "
                             f"({type(exc).__name__}: {exc}); still {width} at a time")
            return width
        self._warn_while("unread", False, "")
        return width

    def cluster_resources(self) -> dict[str, float]:
        from ray.util.state import list_nodes

        total: dict[str, float] = {}
        # every node, dead ones too (a filter on the state makes the API raise on the nodes it leaves out)
        for node in list_nodes(address=self.address, detail=True, raise_on_missing_output=False):
            if node.state != "ALIVE":
                continue
            for name, amount in (node.resources_total or {}).items():
                total[name] = total.get(name, 0.0) + amount
        return total

    # -- the loop ----------------------------------------------------------------------------------------
    def run_all(self, specs: list[RunSpec]) -> dict[str, dict]:
        """Run ``specs`` (none of them done yet), ``concurrency`` at a time; run key -> {"path", "seconds", "error"}."""
        from ray.job_submission import JobStatus

        results: dict[str, dict] = {}
        todo = [(spec, 1) for spec in specs]          # (run, its attempt number); a retry goes to the front
        width = self.width_now(specs, self.max_concurrent or 1)
        self.say(f"[science] {len(todo)} runs as Ray jobs on {self.address}, {width} at a time "
                 f"(report {self.report_id}; each run's console: {self.out}/runs/<run>.log)")
        steps_total, steps_done, t0, last_live = sum(s.steps or 0 for s in specs), 0, time.monotonic(), 0.0
        try:
            while todo or self.running:
                while todo and len(self.running) < width:
                    spec, number = todo.pop(0)
                    self.running[spec.key] = self.submit(spec, number)
                time.sleep(POLL_S)
                for key, attempt in list(self.running.items()):
                    info = self.client.get_job_info(attempt.job_id)
                    attempt.node = attempt.node or (info.driver_node_id or "")[:8]
                    if info.status in (JobStatus.PENDING, JobStatus.RUNNING):
                        continue
                    del self.running[key]
                    width = self.width_now(specs, width)      # what the cluster holds now
                    outcome = self.collect(attempt, info)
                    if outcome["error"] is None or attempt.number > self.retries:
                        results[key] = outcome
                        steps_done += attempt.spec.steps or 0
                        self.say(self.finished_line(len(results), len(specs), attempt, outcome, t0, steps_done,
                                                    steps_total))
                    else:
                        first_line = outcome["error"].splitlines()[0]
                        self.say(f"[science] {key}: attempt {attempt.number} failed ({first_line}); "
                                 f"attempt {attempt.number + 1} of {self.retries + 1} next, {width} at a time")
                        todo.insert(0, (attempt.spec, attempt.number + 1))
                if time.monotonic() - last_live >= self.live_every_s:
                    last_live = time.monotonic()
                    self.say(self.live_line(len(results), len(todo), t0, steps_done, steps_total))
        except BaseException:
            self.stop_all()
            raise
        return results

    def collect(self, attempt: Attempt, info) -> dict:
        """The finished job's files into ``<out>/runs/<run id>/`` and its log into ``<out>/runs/<run id>.log``."""
        runs_dir = self.out / "runs"
        runs_dir.mkdir(parents=True, exist_ok=True)
        seconds = (time.monotonic() - attempt.started if not (info.start_time and info.end_time)
                   else (info.end_time - info.start_time) / 1000)        # the job's own lifetime, ms -> s
        from ray.job_submission import JobStatus

        succeeded = info.status == JobStatus.SUCCEEDED
        deadline = time.monotonic() + (LOG_SETTLE_S if succeeded else 0.0)
        while True:
            try:
                log = self.job_log(attempt.job_id, info.driver_node_id)
            except Exception as exc:           # the driver's node is gone with its log
                log = f"(the job's log could not be read: {type(exc).__name__}: {exc})"
            files = parse_results(log) if succeeded else None
            # a job is SUCCEEDED when its process exits; the last lines it printed (the results) may reach
            # the log file a moment later
            if files is not None or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        (runs_dir / f"{attempt.spec.id}.log").write_text(log)
        if files is None or "summary.json" not in files:
            why = info.message or f"status {info.status}"
            return {"path": str(runs_dir / attempt.spec.id), "seconds": seconds,
                    "error": f"job {attempt.job_id} {info.status}: {why}\n{log[-2000:]}"}
        path = runs_dir / attempt.spec.id
        path.mkdir(parents=True, exist_ok=True)
        for name in sorted(files, key=lambda n: n == "summary.json"):   # summary last: it marks the run done
            (path / name).write_text(files[name])
        return {"path": str(path), "seconds": seconds, "error": None, "node": attempt.node,
                "job": attempt.job_id, "attempts": attempt.number}

    def job_log(self, job_id: str, node_id: str | None) -> str:
        """The job's console. On a cluster it is read from the node its driver ran on, by node id (Ray's state
        API): the job API has that node's agent read it at the head's session path, which is the same place on
        every machine of a cluster but not on nodes that share one machine, each with a temp dir of its own
        (tests/integration/cluster.py). A local head is one node: the job API."""
        if self.local or not node_id:
            return self.client.get_job_logs(job_id)
        query = urlencode({"node_id": node_id, "filename": f"job-driver-{job_id}.log", "lines": -1})
        # the job client's own session (its address, token and TLS settings) for the state API's log endpoint;
        # ray.util.state.get_log would want the GCS address, which a job client does not have
        response = self.client._do_request("GET", f"/api/v0/logs/file?{query}")
        if response.status_code != 200:
            raise RuntimeError(f"the state API answered {response.status_code}: {response.text[:300]}")
        return response.text

    def finished_line(self, done: int, total: int, attempt: Attempt, outcome: dict, t0: float, steps_done: int,
                      steps_total: int) -> str:
        state = "done" if outcome["error"] is None else f"FAILED ({outcome['error'].splitlines()[0]})"
        again = f", attempt {attempt.number}" if attempt.number > 1 else ""
        return (f"[science] {done}/{total} {attempt.spec.key} {state} in {outcome['seconds']:.0f} s on node "
                f"{attempt.node or '?'}{again} ({eta_text(t0, steps_done, steps_total)})")

    def live_line(self, done: int, left: int, t0: float, steps_done: int, steps_total: int) -> str:
        where = ", ".join(f"{key} on {a.node or 'pending'}" for key, a in self.running.items())
        return (f"[science] {done} done, {len(self.running)} running, {left} left "
                f"({eta_text(t0, steps_done, steps_total)}){': ' + where if where else ''}")

    def stop_all(self) -> None:
        for key, attempt in list(self.running.items()):
            try:
                self.client.stop_job(attempt.job_id)
                self.say(f"[science] stopped {attempt.job_id}")
            except Exception as exc:
                self.say(f"[science] could not stop {attempt.job_id}: {type(exc).__name__}: {exc}")
        self.running.clear()


def eta_text(t0: float, steps_done: int, steps_total: int) -> str:
    """``12.3 min so far, ETA 40.1 min``: by steps, not runs (the runs differ in length)."""
    elapsed = time.monotonic() - t0
    if not steps_done:
        return f"{elapsed / 60:.1f} min so far"
    return f"{elapsed / 60:.1f} min so far, ETA {elapsed / steps_done * (steps_total - steps_done) / 60:.1f} min"
