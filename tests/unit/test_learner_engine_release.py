"""Why the GPU smoke calls ``destroy()`` on an engine it is done with: ZeRO's gradient hooks sit in
autograd's C++ nodes, out of the garbage collector's sight, so an engine dropped without it keeps its
weights and optimizer states (on an H100 the shapes stage's bare engine ran out of memory beside it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CODE = """
import gc, weakref, torch
from launch.ops.smoke.learner_stage import init_single_rank
from learner.deepspeed_kit import build_engine, deepspeed_config
from learner.trainer_config import LearnerConfig

init_single_rank(False)
cfg = LearnerConfig(zero_stage=2)
alive = []
for destroy in (False, True):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    engine, *_ = build_engine(model, cfg, deepspeed_config(cfg, world=1, device="cpu", group_size=4), "cpu")
    engine.backward(engine(torch.randn(4, 8)).sum())
    engine.step()
    ref = weakref.ref(model)
    if destroy:
        engine.destroy()
    engine = model = None
    gc.collect()
    alive.append(ref() is not None)
print("ALIVE", alive)
"""


def test_an_engine_is_freed_only_after_destroy():
    out = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ALIVE [True, False]" in out.stdout, out.stdout[-2000:]
