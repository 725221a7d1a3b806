"""The embedded redis-server: auth, loopback only, clean stop, reattach after a driver crash,
AOF recovery after kill -9, REDIS_URL override."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from buffer import BufferConfig, RunBuffer, connect, open_buffer_server
from buffer.server import REDIS_JSON, EmbeddedRedis, find_redis_server
from bench.synthetic import make_group, make_prompt

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_password_required(redis_server):
    no_retry = Retry(NoBackoff(), 0)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=5, retry=no_retry).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=5, retry=no_retry,
                    protocol=2).ping()                   # plain RESP2: the server says NOAUTH
    start = time.monotonic()
    with pytest.raises(redis.AuthenticationError):       # connect() does not retry bad credentials
        connect(redis_server.url.replace(redis_server.password, "wrong")).ping()
    assert time.monotonic() - start < 5
    assert connect(redis_server.url).ping()
    assert len(redis_server.password) >= 24


def test_listens_on_loopback_only(redis_server):
    client = connect(redis_server.url)
    assert list(client.config_get("bind").values()) == ["127.0.0.1"]
    listening = [c.laddr for c in psutil.Process(redis_server.pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening)
    assert {addr.port for addr in listening} == {redis_server.port}


def test_aof_on_and_files_private(redis_server):
    client = connect(redis_server.url)
    assert list(client.config_get("appendonly").values()) == ["yes"]
    assert list(client.config_get("appendfsync").values()) == ["everysec"]
    assert Path(list(client.config_get("dir").values())[0]) == redis_server.data_dir
    for secret in (redis_server.json_path, redis_server.data_dir / "redis.conf"):   # both hold the password
        assert secret.stat().st_mode & 0o777 == 0o600, secret


def test_binary_found():
    assert os.access(find_redis_server(), os.X_OK)


def test_stop_is_clean_and_restart_reuses_port_and_password(own_redis):
    server = own_redis()
    url, pid = server.url, server.pid
    connect(url).set("k", "v")
    server.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert json.loads(server.json_path.read_text())["pid"] is None
    again = own_redis(server.run_dir)
    assert again.url == url and again.pid != pid and not again.attached
    assert connect(url).get("k") == b"v"                 # AOF replayed
    again.stop()


DRIVER = textwrap.dedent("""
    import sys, time
    from buffer import EmbeddedRedis, RunBuffer
    from bench.synthetic import make_prompt
    server = EmbeddedRedis.attach_or_start(sys.argv[1])
    buf = RunBuffer.from_url(server.url, "crash")
    buf.put_prompts([make_prompt(f"p{i}") for i in range(5)])
    buf.publish_version(3, "loc-3")
    print(server.pid, flush=True)
    time.sleep(600)
""")


def test_driver_crash_then_reattach_same_server_same_data(tmp_path, own_redis):
    run_dir = tmp_path / "run"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        server_pid = int(driver.stdout.readline() or 0)
    finally:
        driver.send_signal(signal.SIGKILL)               # the driver dies; its server lives on
        driver.wait(10)
        recorded = json.loads((run_dir / REDIS_JSON).read_text()) if (run_dir / REDIS_JSON).exists() else {}
        own_redis.pids.append(recorded.get("pid"))       # teardown kills it if the test fails
    assert server_pid and server_pid == recorded["pid"]
    assert psutil.pid_exists(server_pid)
    server = EmbeddedRedis.attach_or_start(run_dir)
    try:
        assert server.attached and server.pid == server_pid
        buf = RunBuffer.from_url(server.url, "crash")
        assert buf.get_version() == (3, "loc-3")
        assert [p.prompt_id for _, p in buf.take_prompts("a", 10, block_ms=0)] == [f"p{i}" for i in range(5)]
    finally:
        server.stop()
    assert not psutil.pid_exists(server_pid)


def test_kill9_then_restart_keeps_acknowledged_writes(own_redis):
    server = own_redis()                                 # appendfsync everysec
    url = server.url
    buf = RunBuffer.from_url(url, "aof", BufferConfig(reclaim_idle_ms=100))
    written = [buf.put_group(make_group(f"g{i}", n=2, tokens=64, seed=i)) for i in range(6)]
    taken = buf.take_groups("learner", 3, block_ms=0)
    buf.ack_groups([e for e, _ in taken], [g.group_id for _, g in taken])
    buf.publish_version(7, "loc-7")
    buf.put_prompts([make_prompt("p0")])
    before = buf.counts()
    time.sleep(1.5)                                      # older than the everysec fsync window
    server.kill()
    assert not server.alive()
    restarted = own_redis(server.run_dir)
    assert restarted.url == url and restarted.pid != server.pid
    buf2 = RunBuffer.from_url(url, "aof", BufferConfig(reclaim_idle_ms=100))
    assert buf2.counts() == before
    assert buf2.get_version() == (7, "loc-7")
    assert all(buf2.is_consumed(g.group_id) for _, g in taken)
    rest = buf2.take_groups("learner", 10, block_ms=0)
    assert [e for e, _ in rest] == written[3:]           # the un-ACKed three, nothing else
    assert [p.prompt_id for _, p in buf2.take_prompts("a", 5, block_ms=0)] == ["p0"]
    # the old client object reconnects by itself (same port, same password)
    assert buf.get_version() == (7, "loc-7")
    restarted.stop()


def test_open_buffer_server_prefers_redis_url(tmp_path, monkeypatch, redis_server):
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    url, server = open_buffer_server(BufferConfig(), tmp_path)
    assert url == redis_server.url and server is None and not (tmp_path / REDIS_JSON).exists()
    monkeypatch.delenv("REDIS_URL")
    url, server = open_buffer_server(BufferConfig(redis_url=redis_server.url), tmp_path)
    assert url == redis_server.url and server is None


def test_open_buffer_server_embedded(tmp_path, monkeypatch, own_redis):
    monkeypatch.delenv("REDIS_URL", raising=False)
    url, server = open_buffer_server(BufferConfig(appendfsync="always"), tmp_path)
    own_redis.pids.append(server.pid)
    try:
        assert list(connect(url).config_get("appendfsync").values()) == ["always"]
        assert (tmp_path / REDIS_JSON).exists() and (tmp_path / "redis" / "appendonly.aof").exists()
    finally:
        server.stop()
