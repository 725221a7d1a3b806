"""The sandbox's walls under both identities users run as: root, and an ordinary user (DESIGN.md §10b).

Each identity runs tests/sandbox_escapes.py: a hostile program tries to signal the user's other processes
(a victim, the worker, kill(-1)), read their environment, read, write, truncate or remove the run
directory's files, the staged weights in /dev/shm and the checkout, fork-bomb, exhaust memory, keep a
capability and forge an assert test's verdict. Every attempt must fail and the host stay whole.

As root the script also runs as an unprivileged uid (tests/unprivileged.py: no groups, no capabilities,
the interpreter and checkout made reachable in a private mount namespace). Run by an ordinary user, the
"root" case is skipped and the script runs as that user. Skips: the ordinary-user case where the
checkout or the interpreter cannot be read by other users at all (a 0700 checkout), and, where the host
grants no unprivileged user namespaces, the attacks give way to the refusal check below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import unprivileged

SCRIPT = str(Path(unprivileged.CHECKOUT) / "tests" / "sandbox_escapes.py")
ATTACKS = ("signals", "environ", "files", "fork_bomb", "memory", "capabilities", "forged_verdict")
IS_ROOT = os.geteuid() == 0


def _unreadable_trees() -> list[str]:
    return [t for t in unprivileged.needed_trees() if not unprivileged.readable_by_others(t)]


def _run(identity: str, no_userns: bool = False) -> dict:
    if identity == "root" or not IS_ROOT:
        proc = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=600,
                              cwd=unprivileged.CHECKOUT)
    else:
        proc = unprivileged.run_as(unprivileged.free_uid(), [sys.executable, SCRIPT], no_userns=no_userns)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["root", "user"])
def escapes(request) -> tuple[str, dict]:
    identity = request.param
    if identity == "root" and not IS_ROOT:
        pytest.skip("not running as root: the ordinary-user case covers this host")
    if identity == "user" and IS_ROOT and _unreadable_trees():
        pytest.skip(f"other users cannot read {_unreadable_trees()}: no ordinary user could run lagrl from here")
    return identity, _run(identity)


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_hostile_program_reaches_nothing_of_the_user(escapes, attack):
    identity, report = escapes
    if "refused" in report:
        assert identity == "user", report
        pytest.skip(f"this host grants no unprivileged user namespaces: code rewards refuse ({report['refused'][:200]})")
    assert report[attack]["held"], (identity, report["isolation"], report[attack]["detail"])


def test_the_walls_are_the_same_for_both_identities(escapes):
    identity, report = escapes
    if "refused" in report:
        pytest.skip("refused: see test_without_user_namespaces_code_rewards_refuse")
    for wall in ("net", "mount", "rootfs", "pid", "ipc", "seccomp"):
        assert wall in report["isolation"], (identity, report["isolation"])
    assert ("uid" in report["isolation"]) == (identity == "root" and IS_ROOT)      # the throwaway uid is root's
    assert ("userns" in report["isolation"]) == (report["uid"] != 0)


@pytest.mark.skipif(not IS_ROOT, reason="simulating a host without user namespaces needs root to drop from")
def test_without_user_namespaces_code_rewards_refuse():
    """A pod whose seccomp profile refuses user namespaces: the start check names what is missing and the flag."""
    if _unreadable_trees():
        pytest.skip(f"other users cannot read {_unreadable_trees()}")
    report = _run("user", no_userns=True)
    message = report["refused"]
    assert message.startswith("error: the code sandbox on this host lacks")
    for wall in ("mount", "pid", "rootfs"):
        assert wall in message.split("(it has")[0]
    assert "--rewards.code_isolation weak" in message and "user namespace" in message
