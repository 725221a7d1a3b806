"""The collective weight transport on NCCL: the same protocol and code as the gloo tests, the backend
swapped. Needs CUDA and at least 2 GPUs (NCCL puts no two ranks of one communicator on one device):
the learner on cuda:0, members on cuda:1.. . Skipped elsewhere; run on a CUDA machine with

    .venv/bin/python -m pytest -m gpu -s tests/ && .venv/bin/python bench/weight_sync.py --device cuda

- protocol: versions arrive exactly; a member SIGKILLed while idle is named and the group re-formed;
  one SIGKILLed mid-broadcast: NCCL kernels do not fail on a dead peer, so the learner's heartbeat
  watch names it (not the collective timeout) and the survivor aborts at the learner's signal;
- the tiny on-policy run with 2 actors on GPU engines, learner on GPU: lag 0, exact weights.
"""

from __future__ import annotations

import time

import pytest
import torch

from actors.transport.config import CollectiveConfig
from tests.collective_members import Rank0, checksums

pytestmark = [pytest.mark.gpu, pytest.mark.integration]

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs = pytest.mark.skipif(GPUS < 2, reason="needs CUDA with >= 2 GPUs")

CFG = CollectiveConfig(backend="nccl", bucket_mb=1, join_timeout_s=60.0, collective_timeout_s=120.0,
                       heartbeat_s=0.2, stale_after_s=3.0, max_attempts=3)


def _same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(abs(got[k] - want[k]) <= 1e-6 * max(1.0, abs(want[k])) for k in want)


@needs
def test_nccl_protocol_versions_and_faults():
    lr = Rank0(CFG, device="cuda:0")
    members = ["A", "B"] if GPUS >= 3 else ["A"]
    try:
        lr.spawn("A", die_at=(3, 0), device="cuda:1")
        if "B" in members:
            lr.spawn("B", device="cuda:2")
        lr.wait_live(members)
        [out] = lr.publish(1)
        assert out["errors"] == 0 and out["members"] == len(members)
        assert "(nccl, 5 buckets)" in out["events"][0]
        assert all(_same(lr.received(m, 1), checksums(1)) for m in members)
        [out] = lr.publish(2)
        assert out["errors"] == 0 and all(_same(lr.received(m, 2), checksums(2)) for m in members)
        # A dies loading bucket 0 of version 3: the learner names it within about stale_after_s
        t0 = time.monotonic()
        outcomes = lr.publish(3)
        assert time.monotonic() - t0 < CFG.collective_timeout_s
        assert outcomes[0]["errors"] == 1 and "missing A (rank 1" in outcomes[0]["events"][-1]
        assert outcomes[-1]["errors"] == 0
        if "B" in members:
            assert outcomes[-1]["members"] == 1 and _same(lr.received("B", 3), checksums(3))
    finally:
        lr.close()


@needs
@pytest.mark.skipif(GPUS < 3, reason="the run needs 3 GPUs: the learner and 2 engines")
def test_onpolicy_tiny_run_on_nccl(tmp_path):
    from tests.integration.harness import TINY_TWO_ACTORS, assert_on_policy, run_to_end

    steps = 5
    summary, rows, log = run_to_end(tmp_path, "gpu", [*TINY_TWO_ACTORS, "--steps", str(steps),
                                                      "--actors.weight_transport", "nccl", "--actors.num_gpus", "1",
                                                      "--learner.device", "cuda", "--actors.gpu_memory_utilization",
                                                      "0.3", "--learner.dtype", "fp32"])
    assert_on_policy(rows, steps)
    assert "[weights] version 0: group 1 formed with lagrl-gen-gpu-0 (rank 1), lagrl-gen-gpu-1 (rank 2) (nccl" in log
    assert max(r["mismatch/kl_k3"] for r in rows) < 1e-4     # fp32 on both sides: kernel rounding only
