"""What the integration tests share to run a driver and check what it did.

    DriverProcess / start_driver / run_to_end   a ``launch/`` entry script as a subprocess in its own session
    DriverRun                                   the tiny off-policy run against the test's Redis, watched and
                                                acted on through the buffer (kill the busiest actor, ...)
    metrics_rows / trained_groups               a run's metrics.jsonl (every row, in the order written)
    audit_books / assert_books / finished_run_audit   the books of ``buffer.audit``
    run_notebook / png_count                    notebooks/monitor.ipynb executed headless
    alive_redis / kill_pid                      teardown that only ever signals a pid the session started
    console_copy                                what an in-process run prints, copied into a file
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from rewards.problems import read_jsonl

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "monitor.ipynb"
TRACKED_RUN_ID = "tracked-3"
# the shared run's argv (a resume must give the same, and the same --buffer.redis_url: conftest's
# tracked_redis, a password-protected server): 3 tiny multistage steps, a 7-token stage for step 0
# (the tiny world's answers run 7 tokens, a few up to ~14, so it cuts the longer ones), then 16 tokens
TRACKED_RUN_ARGV = ["--tiny", "--steps", "3", "--tracking", "tensorboard,wandb,mlflow",
                    "--learner.checkpoint_every", "1", "--data.stages", '[{"max_tokens": 7, "steps": 1}, {"max_tokens": 16}]',
                    "--data.eval_max_problems", "16", "--run_id", TRACKED_RUN_ID]

# the tiny run with 2 actors and a 4-problem, 1-sample evaluation only at the ends: the transport tests' run
TINY_TWO_ACTORS = ["--tiny", "--actors.num_actors", "2", "--data.eval_every", "0", "--data.eval_n", "1",
                   "--data.eval_max_problems", "4"]


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float, proc: subprocess.Popen,
               log_tail: Callable[[], str], poll_s: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail the test with the
    process's log if the process exits first or ``timeout_s`` passes. Never a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"driver exited ({proc.returncode}) before {what}:\n{log_tail()}")
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}:\n{log_tail()}")


class DriverProcess:
    """A ``launch/`` entry script run as a subprocess in its own session, its output in a log file.

    ``env`` is the whole environment of the driver (pass ``RAY_ADDRESS`` to join a cluster,
    ``REDIS_URL`` for an external Redis). Teardown (:meth:`close`) asks a still running driver to
    stop cleanly (SIGTERM, as ``ray job stop`` does), then kills its whole session.
    """

    def __init__(self, script: str, *, run_dir: Path, run_id: str, args: list[str], env: dict, log_path: Path):
        self.run_id, self.run_path, self.log_path = run_id, run_dir / run_id, log_path
        cmd = [sys.executable, str(REPO / "launch" / script), "--run_dir", str(run_dir), "--run_id", run_id, *args]
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 5000) -> str:
        return self.log()[-n:]

    def wait_for(self, condition: Callable[[], Any], what: str, timeout_s: float, poll_s: float = 0.1) -> Any:
        return wait_until(condition, what, timeout_s, self.proc, self.log_tail, poll_s=poll_s)

    def kill(self) -> None:
        """SIGKILL the driver's whole session (driver, its local Ray if it started one)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def finish(self, timeout_s: float) -> dict:
        """Wait for a clean exit; returns the run's summary.json."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"driver still running after {timeout_s:.0f}s:\n{self.log_tail()}")
        assert rc == 0, f"driver exited {rc}:\n{self.log_tail()}"
        return json.loads((self.run_path / "summary.json").read_text())

    def close(self, grace_s: float = 90.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def driver_env(env: dict | None = None, *, ray_address: str | None = None, redis_url: str | None = None) -> dict:
    """A driver's environment: ``env`` (default this process's) with Ray's log dedup off, joined to the
    cluster at ``ray_address`` (else its own local Ray) and using the Redis at ``redis_url`` (else its own)."""
    env = {**(os.environ if env is None else env), "RAY_DEDUP_LOGS": "0"}
    for key, value in (("RAY_ADDRESS", ray_address), ("REDIS_URL", redis_url)):
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def start_driver(script: str, tmp_path: Path, run_id: str, args: list[str], *, log_name: str | None = None,
                 **where) -> DriverProcess:
    """``launch/<script>`` writing to ``tmp_path/runs/<run_id>``, its console to ``tmp_path/<log_name>.log``;
    ``where``: :func:`driver_env`'s ``env``, ``ray_address`` and ``redis_url``."""
    return DriverProcess(script, run_dir=tmp_path / "runs", run_id=run_id, args=args, env=driver_env(**where),
                         log_path=tmp_path / f"{log_name or run_id}.log")


def run_to_end(tmp_path: Path, run_id: str, args: list[str], timeout_s: float = 900,
               script: str = "onpolicy.py") -> tuple[dict, list[dict], str]:
    """A driver (own Ray, own Redis) run to its clean end: (summary.json, its step rows, its console)."""
    d = start_driver(script, tmp_path, run_id, args)
    try:
        summary = d.finish(timeout_s)
        return summary, [r for r in metrics_rows(d.run_path) if "lag/max" in r], d.log()
    finally:
        d.close()


def assert_on_policy(rows: list[dict], steps: int) -> None:
    assert len(rows) == steps
    assert all(r["mode"] == "on_policy" and r["lag/max"] == 0 and r["lag/straddled"] == 0 for r in rows)


# ----------------------------------------------------------------------------- a run's files and books
def metrics_rows(run_path: Path) -> list[dict]:
    """Every row of the run's ``metrics.jsonl`` in the order written, [] before the file exists. A step
    retrained after a resume appears each time (one row per step: ``launch.run.summary.read_metrics``);
    the torn last row of a run still writing is skipped."""
    path = run_path / "metrics.jsonl"
    return read_jsonl(path, allow_torn_tail=True) if path.exists() else []


def trained_groups(run_path: Path) -> int:
    """Groups the learner trained on, from its own metrics.jsonl (not from Redis)."""
    return sum(int(r.get("groups/trained", 0)) for r in metrics_rows(run_path))


def audit_books(redis, run_id: str, label: str | None = None):
    """``buffer.audit`` of run ``run_id``; ``redis`` a client or a URL (connected for the call); printed
    as one line when ``label`` is given."""
    from buffer import connect
    from buffer.audit import audit

    client = connect(redis, wait_s=10) if isinstance(redis, str) else redis
    try:
        books = audit(client, run_id)
    finally:
        if client is not redis:
            client.close()
    if label:
        print(f"[audit {label}] {books.line()}", flush=True)
    return books


def assert_books(books) -> None:
    """Nothing lost, nothing consumed twice, every outcome accounted for, and something trained."""
    assert books.prompts_lost == 0 and books.groups_lost == 0 and books.duplicates == 0, books.line()
    assert books.balanced, books.line()
    assert books.outcomes["trained"] > 0, books.line()


def finished_run_audit(run_path: Path, run_id: str):
    """The books of a finished run: its redis-server (stopped by the driver) restarted from the AOF."""
    from buffer.server import EmbeddedRedis

    with EmbeddedRedis.attach_or_start(run_path) as server:
        return audit_books(server.url, run_id)


# ----------------------------------------------------------------------------- the tiny off-policy run
class DriverRun(DriverProcess):
    """The tiny off-policy run (2 actors) against a Redis the test owns, watched through the buffer."""

    SCRIPT = "offpolicy_reuse4.py"
    RECLAIM_MS = 4000          # a dead actor's prompts are reclaimed after this idle time (default 60 s)
    BASE_ARGS = ("--tiny", "--actors.num_actors", "2", "--buffer.reclaim_idle_ms", str(RECLAIM_MS),
                 "--data.eval_n", "1", "--data.eval_max_problems", "4", "--data.eval_every", "0")

    def __init__(self, tmp_path: Path, redis_url: str, run_id: str, args: list[str]):
        from buffer import RunKeys, connect

        self.keys = RunKeys(run_id)
        self.client = connect(redis_url)
        self.started = time.monotonic()
        super().__init__(self.SCRIPT, run_dir=tmp_path / "runs", run_id=run_id, env=driver_env(redis_url=redis_url),
                         log_path=tmp_path / f"{run_id}.log", args=[*self.BASE_ARGS, *args])

    def steps_done(self) -> int:
        """Learner steps finished, from the driver's metrics.jsonl. Not the metrics stream's length: the
        stream is capped (``buffer.metrics_maxlen``; 100 in the soak), so its length stops at the cap,
        and a 30-minute soak read a 1163 s "stall" from a learner whose longest step took 13.6 s."""
        from launch.run.summary import read_metrics

        return len(read_metrics(self.run_path / "metrics.jsonl"))

    def wait_for(self, condition, what: str, timeout_s: float = 300.0, poll_s: float = 0.2):
        return super().wait_for(condition, what, timeout_s, poll_s)

    def finish(self, timeout_s: float = 300.0) -> dict:
        return super().finish(timeout_s)

    def close(self, grace_s: float = 90.0) -> None:
        super().close(grace_s)
        self.client.close()

    def audit(self, label: str):
        return audit_books(self.client, self.run_id, label)

    # ---- generation actors
    def live_actors(self, max_age_s: float = 6.0) -> dict[str, dict]:
        """actor_id -> heartbeat of actors that beat recently from a live GenerationActor process."""
        from buffer.monitor import Monitor

        return {a: hb for a, hb in Monitor(self.client, self.run_id).actors().items()
                if hb.get("age_s", 1e9) < max_age_s and is_generation_actor(hb.get("pid"))}

    def pending_prompts(self, actor_id: str) -> list[str]:
        rows = self.client.xpending_range(self.keys.prompts, "actors", "-", "+", 10_000, consumername=actor_id)
        return [text(r["message_id"]) for r in rows]

    def kill_busiest_actor(self, exclude: str | None = None) -> tuple[str, int, list[str]]:
        """SIGKILL the live actor (not ``exclude``) holding the most prompts; returns (actor id, pid,
        the prompts it held)."""
        def pick():
            live = {a: hb for a, hb in self.live_actors().items() if a != exclude}
            held = sorted(((len(self.pending_prompts(a)), a) for a in live), reverse=True)
            return held and held[0][0] > 0 and (held[0][1], live[held[0][1]]["pid"])
        actor_id, pid = self.wait_for(pick, "a live actor holding prompts", timeout_s=120)
        os.kill(pid, signal.SIGKILL)
        self.wait_for(lambda: not is_generation_actor(pid), f"actor pid {pid} to die", timeout_s=10)
        return actor_id, pid, self.pending_prompts(actor_id)   # frozen now: its PEL at death

    def answered_by(self, prompt_entry_ids: list[str]) -> dict[str, int]:
        """Which actor answered each of these prompts ('unanswered' if none did)."""
        from buffer.codec import decode_group, decode_prompt

        prompt_ids = {}
        for eid in prompt_entry_ids:
            [(_, fields)] = self.client.xrange(self.keys.prompts, eid, eid, count=1)
            prompt_ids[decode_prompt(fields[b"data"]).prompt_id] = eid
        by: dict[str, int] = {}
        for _, fields in self.client.xrange(self.keys.groups):
            g = decode_group(fields[b"data"])
            if g.prompt_id in prompt_ids:
                prompt_ids.pop(g.prompt_id)
                by[g.actor_id] = by.get(g.actor_id, 0) + 1
        if prompt_ids:
            by["unanswered"] = len(prompt_ids)
        return by


def is_generation_actor(pid) -> bool:
    try:
        p = psutil.Process(int(pid))
        return p.status() != psutil.STATUS_ZOMBIE and "GenerationActor" in " ".join(p.cmdline())
    except (psutil.Error, TypeError, ValueError):
        return False


def text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


# ----------------------------------------------------------------------------- the monitoring notebook
def run_notebook(kernel_name: str, env: dict[str, str], timeout_s: int = 180):
    """Execute the notebook with ``env`` set (kernel: the ``kernel_env`` fixture); returns (executed
    notebook, summary dict)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)                   # the kernel inherits the environment at start
    try:
        NotebookClient(nb, kernel_name=kernel_name, timeout=timeout_s, startup_timeout=120,
                       resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors, errors
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                  for o in c.get("outputs", []) if o.output_type == "stream")
    line = next(ln for ln in out.splitlines() if ln.startswith("MONITOR_SUMMARY "))
    return nb, json.loads(line.removeprefix("MONITOR_SUMMARY "))


MONITOR_PNGS = 6             # figures notebooks/monitor.ipynb draws (one per show() call)


def png_count(nb) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []) if o.output_type == "display_data")


# ----------------------------------------------------------------------------- teardown
def kill_pid(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def alive_redis(pid: int | None) -> bool:
    """Still our redis-server (not a zombie, not a recycled pid)."""
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and "redis-server" in p.name()
    except Exception:
        return False


# ----------------------------------------------------------------------------- an in-process run's console
class _Tee(io.TextIOBase):
    """Writes go to ``stream`` and, while ``copy`` is set, to ``copy`` too. A logging handler created
    meanwhile keeps this object after :func:`console_copy` ends: it then writes to ``stream`` alone."""

    def __init__(self, stream, copy):
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        copy = self.copy
        if copy is not None:
            try:
                copy.write(text)
            except ValueError:          # closed by console_copy's end meanwhile (another thread)
                pass
        return self.stream.write(text)

    def flush(self) -> None:
        copy = self.copy
        if copy is not None:
            try:
                copy.flush()
            except ValueError:
                pass
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


@contextmanager
def console_copy(path: Path) -> Iterator[None]:
    """Everything this process prints inside the block into ``path``, as a terminal would show it:
    ``sys.stdout``/``sys.stderr`` (teed: pytest still shows it on a failure) and file descriptors 1 and
    2 (C libraries, child processes started meanwhile; those go to ``path`` only)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    out = open(path, "w", buffering=1)
    saved_streams, saved_fds = (sys.stdout, sys.stderr), (os.dup(1), os.dup(2))
    tees = [_Tee(s, out) for s in saved_streams]
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.stdout, sys.stderr = tees
        yield
    finally:
        sys.stdout, sys.stderr = saved_streams
        for tee in tees:
            tee.flush()
            tee.copy = None
        for fd, saved in zip((1, 2), saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        out.close()
