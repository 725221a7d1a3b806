"""buffer.server without a server: the private-file writer that holds the run's Redis password."""

from __future__ import annotations

import os
import stat

from buffer.server import write_private


def _stale_temp(path):
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the name write_private uses


def test_a_stale_temp_file_does_not_lend_its_mode(tmp_path):
    """A temp file left by a crashed writer with the same pid kept its 0644 under O_TRUNC, and the
    password file was then renamed into place world-readable."""
    path = tmp_path / "redis.json"
    stale = _stale_temp(path)
    stale.write_text("old contents, longer than the new ones")
    stale.chmod(0o644)
    write_private(path, "secret")
    assert path.read_text() == "secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not stale.exists()


def test_a_stale_temp_symlink_is_not_followed(tmp_path):
    path, victim = tmp_path / "redis.json", tmp_path / "elsewhere"
    victim.write_text("untouched")
    victim.chmod(0o644)
    _stale_temp(path).symlink_to(victim)
    write_private(path, "secret")
    assert victim.read_text() == "untouched" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert path.read_text() == "secret" and not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
