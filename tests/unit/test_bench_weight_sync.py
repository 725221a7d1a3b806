"""bench/weight_sync.py on CUDA: receivers dealt round-robin over the GPUs there are (one GPU: all on
cuda:0, never cuda:{rank}), gloo when ranks share a GPU, a GPU share per object-store fetcher."""

from __future__ import annotations

import importlib.util
import sys
from argparse import Namespace
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "weight_sync.py"
SPEC = importlib.util.spec_from_file_location("bench_weight_sync", BENCH)
ws = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ws)


def test_one_gpu_puts_every_receiver_on_cuda0_and_links_over_host_memory():
    args = Namespace(device="cuda", gpus=1, receivers=3, backend="gloo")
    assert [ws._rx_device(args, r) for r in range(4)] == ["cuda:0"] * 4
    assert ws.link_device(args, "cuda:0") == "cpu" and ws.backend_of("cpu") == "gloo"
    assert ws._fetcher_gpus(args) == 0.33


def test_enough_gpus_give_each_rank_its_own_and_nccl():
    args = Namespace(device="cuda", gpus=4, receivers=3, backend="nccl")
    assert [ws._rx_device(args, r) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert ws.link_device(args, "cuda:2") == "cuda:2" and ws.backend_of("cuda:2") == "nccl"
    assert ws._fetcher_gpus(args) == 1.0


def test_backend_auto_and_refusal(monkeypatch):
    monkeypatch.setattr(ws, "_gpu_count", lambda: 1)
    monkeypatch.setattr(sys, "argv", ["weight_sync.py", "--device", "cuda", "--receivers", "2"])
    assert ws.parse().backend == "gloo"
    monkeypatch.setattr(sys, "argv", ["weight_sync.py", "--device", "cuda", "--backend", "nccl"])
    with pytest.raises(SystemExit):
        ws.parse()
    monkeypatch.setattr(ws, "_gpu_count", lambda: 2)
    monkeypatch.setattr(sys, "argv", ["weight_sync.py", "--device", "cuda"])
    assert ws.parse().backend == "nccl"
