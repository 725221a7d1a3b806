"""The learner's optimizer (learner.optimizer) in real DeepSpeed engines on CPU, ZeRO-0 and ZeRO-2: the
same updates as DeepSpeed's config-built AdamW the learner used before, a checkpoint resume restores
the optimizer state exactly, and DeepSpeed's shared-memory comm op is neither built nor loaded
(learner.deepspeed_kit.init_distributed). One subprocess (tests/deepspeed_optimizer_check.py), ~30 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("optimizer")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp / "torch_extensions"), "PYTHONPATH": str(REPO)}
    out = tmp / "out.json"
    proc = subprocess.run([sys.executable, "-m", "tests.deepspeed_optimizer_check", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("stage", ["0", "2"])
def test_torch_adamw_client_matches_the_former_deepspeed_adamw(check, stage):
    s = check["stages"][stage]
    assert s["optimizer"] == "torch_adamw" and s["client"] == "AdamW" and s["foreach"] is True
    assert s["moved"] > 1e-3                         # the three updates did change the weights
    assert s["same_as_before"] <= 1e-6, s            # same maths (foreach vs per-tensor loop: rounding at most)


@pytest.mark.parametrize("stage", ["0", "2"])
def test_resume_restores_the_optimizer_state(check, stage):
    r = check["stages"][stage]["resume"]
    assert r["version"] == 2 and r["moments"] > 0
    assert r["moments_diff"] == 0.0 and r["lr"] == r["saved_lr"]
    assert r["after_step_diff"] == 0.0               # the next update is bit-identical after the restore


def test_no_deepspeed_op_is_built_or_loaded(check):
    assert check["shm_op_loaded"] is False
    assert check["extension_dir"] == []
