"""Real servers for integration tests: one private redis-server for the whole session, and a
Ray head a test owns (``ray_head``) for `ray job submit` and drivers run as subprocesses.

Tests that need their own server (restarts, kill -9) start one with ``EmbeddedRedis`` in a
temporary run dir and clean it up through :func:`own_redis`; the finalizers only ever signal a
pid that this session started.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from actors.cluster.priority import START_ENV
from tests.conftest import find_free_port
from tests.integration.harness import REPO, TRACKED_RUN_ARGV, alive_redis, console_copy, kill_pid

VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class TrackedRun:
    """The shared tracked run, and what it was given and printed (test_run_secrets.py greps them)."""
    run_path: Path
    rows: list[dict]
    evals: list[dict]
    cfg: object             # the resolved RunConfig
    redis_url: str          # the password-protected server it ran against (--buffer.redis_url)
    console: Path           # everything the run printed: sys.stdout/stderr and fds 1/2


@pytest.fixture(scope="session")
def tracked_redis(tmp_path_factory):
    """The tracked run's Redis, handed to it as ``--buffer.redis_url redis://:<password>@127.0.0.1:<port>/0``
    as a user's external Redis would be (buffer.server.EmbeddedRedis: generated password, loopback, a
    free port); killed by pid at the end of the session."""
    yield from _embedded_redis(tmp_path_factory.mktemp("tracked-redis"))


@pytest.fixture(scope="session")
def tracked_run_record(ray_local, tiny_world, tracked_redis, tmp_path_factory) -> TrackedRun:
    """One 3-step tiny run that three modules read, made once (a run start is most of a small run's
    cost): every tracker on (test_tracking_run.py), a stage boundary after step 0 (test_stages.py), and
    a password in its Redis URL that no tracker, log, console line or meta may show (test_run_secrets.py).
    ``sys.argv`` is the launch command line while it runs, as W&B records it."""
    import json

    from launch.run.compose import build_config
    from launch.run.driver import run

    top = tmp_path_factory.mktemp("tracked")
    run_dir, console = top / "runs", top / "console.log"
    argv = [*TRACKED_RUN_ARGV, "--buffer.redis_url", tracked_redis.url, "--run_dir", str(run_dir)]
    saved = {k: os.environ.get(k) for k in ("WANDB_MODE", "MLFLOW_TRACKING_URI", "REDIS_URL")}
    saved_argv = sys.argv
    os.environ["WANDB_MODE"] = "offline"
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("REDIS_URL", None)           # it would win over --buffer.redis_url
    try:
        sys.argv = [str(REPO / "launch" / "ablate.py"), "--preset", "multistage", *argv]
        with console_copy(console):
            cfg, _ = build_config(argv, "multistage")
            result = run(cfg)
    finally:
        sys.argv = saved_argv
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    read = lambda name: [json.loads(line) for line in (result.run_path / name).read_text().splitlines()]  # noqa: E731
    rows, evals = read("metrics.jsonl"), read("evals.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2] and [e["step"] for e in evals] == [0, 3]
    return TrackedRun(result.run_path, rows, evals, cfg, tracked_redis.url, console)


@pytest.fixture(scope="session")
def tracked_run(tracked_run_record):
    """(run path, step rows, evaluation rows, resolved config) of the shared tracked run."""
    t = tracked_run_record
    return t.run_path, t.rows, t.evals, t.cfg


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A private embedded redis-server per test module (a module may override it)."""
    from buffer.server import EmbeddedRedis

    with EmbeddedRedis(tmp_path_factory.mktemp("redis-module")).start() as server:
        yield server.url


@pytest.fixture(scope="module")
def policy(tiny_world):
    """The tiny model in the test process: behaviour log-probs and reference computations."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_world.model_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tok(tiny_world):
    """The tiny world's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_world.model_dir)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A session-wide embedded redis-server (password, loopback, AOF), stopped at the end."""
    yield from _embedded_redis(tmp_path_factory.mktemp("redis-session"))


def _embedded_redis(directory: Path):
    """An embedded redis-server in ``directory`` for a fixture's lifetime; killed by pid if it will not stop."""
    from buffer.server import EmbeddedRedis

    server = EmbeddedRedis(directory, stop_at_exit=False).start()
    pid = server.pid
    yield server
    try:
        server.stop(timeout_s=10)
    finally:
        if alive_redis(pid):
            kill_pid(pid)


@pytest.fixture
def own_redis(tmp_path: Path):
    """Factory of private servers for fault tests; every pid started here is killed at teardown."""
    from buffer.server import EmbeddedRedis

    started: list = []

    def start(run_dir: Path | None = None, **kwargs) -> EmbeddedRedis:
        server = EmbeddedRedis(run_dir or tmp_path / "run", stop_at_exit=False, **kwargs).start()
        started.append(server.pid)
        return server

    start.pids = started
    yield start
    for pid in started:
        if alive_redis(pid):
            kill_pid(pid)


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A private kernel spec running this interpreter (for ``harness.run_notebook``); Jupyter/IPython
    state kept in tmp, so nothing is registered in the user's Jupyter dirs."""
    import json

    spec_dir = tmp_path / "jupyter" / "kernels" / "lagrl-venv"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "lagrl venv", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("MPLBACKEND", raising=False)     # the kernel's inline backend renders PNGs
    for var in ("LAGRL_REDIS_URL", "LAGRL_RUN_ID", "LAGRL_RUN_DIR"):
        monkeypatch.delenv(var, raising=False)
    return "lagrl-venv"


@pytest.fixture
def run_id() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class RayHead:
    dashboard: str    # http://127.0.0.1:PORT, for `ray job submit --address`
    gcs: str          # 127.0.0.1:PORT, for RAY_ADDRESS of a driver joining the cluster
    env: dict         # environment with the head's token (RAY_AUTH_MODE/RAY_AUTH_TOKEN) and PATH


@pytest.fixture
def ray_head(tmp_path):
    """A Ray head this test owns (its own process group, loopback only, token auth with a private
    token), killed by process group afterwards. Ready when it has run a trivial job."""
    gcs, dash = find_free_port(), find_free_port()
    # Every fixed default port gets a free one: another Ray on this machine (the session's local Ray,
    # a user's) already holds e.g. the job agent's 52365, and the head would then take no jobs.
    ports = [f"--{name}={find_free_port()}" for name in (
        "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
        "metrics-export-port", "ray-client-server-port", "node-manager-port", "object-manager-port")]
    # Token auth (as the README recommends), with a token private to this test instead of ~/.ray/auth_token.
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "RAY_DEDUP_LOGS": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), **START_ENV}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
         "--num-cpus", "6", "--include-dashboard", "true", "--disable-usage-stats", *ports],
        env=env, stdout=open(tmp_path / "ray_head.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    deadline, last = time.monotonic() + 300, ""
    while time.monotonic() < deadline:
        # ready = a trivial job runs: `ray job list` answers before the job agent can take jobs
        try:
            probe = subprocess.run([str(VENV_BIN / "ray"), "job", "submit", "--address", address, "--", "true"],
                                   env=env, capture_output=True, text=True, timeout=90)
            if probe.returncode == 0:
                break
            last = (probe.stdout + probe.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            last = "probe job timed out after 90 s"
        if proc.poll() is not None:
            raise RuntimeError((tmp_path / "ray_head.log").read_text()[-3000:])
        time.sleep(3)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise TimeoutError(f"ray head did not take a job in 300 s; last probe: {last}\n"
                           f"head log: {(tmp_path / 'ray_head.log').read_text()[-2000:]}")
    yield RayHead(dashboard=address, gcs=f"127.0.0.1:{gcs}", env=env)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)       # `ray start --block` takes ~30 s to wind down; the test is over
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
