"""A niced Ray worker says so, naming the fix (actors.cluster.priority)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.cluster.priority import warn_if_niced

REPO = Path(__file__).resolve().parents[2]


def test_a_niced_process_warns_once_naming_the_setting():
    code = ("import os; os.nice(5); from actors.cluster.priority import warn_if_niced; "
            "print(warn_if_niced('generation actor a-0'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    nice = int(out.stdout.strip())
    assert nice >= 5
    [line] = out.stderr.strip().splitlines()
    assert "generation actor a-0 (pid " in line and f"runs at nice {nice}" in line
    assert "RAY_worker_niceness=0" in line


@pytest.mark.skipif(os.nice(0) > 0, reason="this test process is niced itself")
def test_a_process_at_normal_priority_is_quiet(capsys):
    assert warn_if_niced("learner rank 0") == 0
    assert capsys.readouterr().err == ""
