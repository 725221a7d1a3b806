"""Real servers for integration tests: one private redis-server for the whole session.

Tests that need their own server (restarts, kill -9) start one with ``EmbeddedRedis`` in a
temporary run dir and clean it up through :func:`own_redis`; the finalizers only ever signal a
pid that this session started.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest


def _kill_pid(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A session-wide embedded redis-server (password, loopback, AOF), stopped at the end."""
    from buffer.server import EmbeddedRedis

    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-session"), stop_at_exit=False).start()
    pid = server.pid
    yield server
    try:
        server.stop(timeout_s=10)
    finally:
        if _alive(pid):
            _kill_pid(pid)


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
        if _alive(pid):
            _kill_pid(pid)


@pytest.fixture
def run_id() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _alive(pid: int | None) -> bool:
    """Still our redis-server (not a zombie, not a recycled pid)."""
    if not pid:
        return False
    try:
        import psutil

        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and "redis-server" in p.name()
    except Exception:
        return False
