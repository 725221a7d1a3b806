"""Secrets never leave the run directory (DESIGN.md §10b), on a real run: the shared tracked run
(tests/integration/conftest.py; every tracker on) is given a password-protected Redis as
``--buffer.redis_url redis://:<password>@127.0.0.1:<port>/0``, and its password is looked for, byte
for byte, in everything it wrote outside the two private files that must hold it (``config.json``,
``redis_url.txt``, both 0600): TensorBoard's event files, the W&B offline run, the MLflow store
(``runs/mlruns``, shared by every run of ``runs/``), every other file of the run directory (logs,
checkpoints, metrics), its console, and what it left in Redis (the run's meta, which notebooks and other
runs on a shared server read). The redaction itself: tests/unit/test_launch_run_redact.py."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from urllib.parse import urlparse

import pytest

from launch.config.redact import REDACTED

pytestmark = pytest.mark.integration

PRIVATE = ("config.json", "redis_url.txt")      # owner-only, and where a resume reads the URL back


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_the_redis_password_reaches_no_tracker_log_console_or_meta(tracked_run_record):
    from buffer import RunKeys, connect

    t = tracked_run_record
    password = urlparse(t.redis_url).password
    assert password and len(password) >= 16
    secret = password.encode()
    run_path, store = t.run_path, t.run_path.parent / "mlruns"

    # the private files hold it (so the search below looks for the right bytes), readable by the owner only
    assert stat.S_IMODE(run_path.stat().st_mode) == 0o700
    for name in PRIVATE:
        assert secret in (run_path / name).read_bytes() and stat.S_IMODE((run_path / name).stat().st_mode) == 0o600
    assert json.loads((run_path / "config.json").read_text())["buffer"]["redis_url"] == t.redis_url

    # every tracker wrote something (an empty search proves nothing)
    tracker_files = {"tensorboard": _files(run_path / "tb"), "wandb": _files(run_path / "wandb"),
                     "mlflow": _files(store)}
    assert all(tracker_files.values()), {k: len(v) for k, v in tracker_files.items()}
    searched = [p for p in _files(run_path) if p.relative_to(run_path).as_posix() not in PRIVATE] + _files(store)
    assert any(p.name.endswith(".log") for p in searched), "the run's logs are among the files searched"
    console = t.console.read_text(errors="replace")
    assert f"[driver] run {t.cfg.run_id} in " in console, console[-2000:]

    leaks = [str(p) for p in searched if secret in p.read_bytes()]
    leaks += ["the console"] if password in console else []
    client = connect(t.redis_url, wait_s=10)
    try:
        for key in client.scan_iter(count=1000):          # this server held the run (and its evaluations) only
            kind = client.type(key)
            values = (client.hgetall(key).items() if kind == b"hash" else [(key, client.get(key))] if kind == b"string"
                      else [])
            leaks += [f"redis {key.decode()}" for pair in values for v in pair if v and secret in v]
        meta = json.loads(client.hget(RunKeys(t.cfg.run_id).meta, "config"))
    finally:
        client.close()
    assert not leaks, f"the Redis password is in: {leaks}"

    # what they show instead: the URL with its password masked
    shown = f"redis://:{REDACTED}@127.0.0.1:{urlparse(t.redis_url).port}/0"
    assert meta["buffer"]["redis_url"] == shown and meta["run_id"] == t.cfg.run_id
    assert f"redis {shown}" in console
