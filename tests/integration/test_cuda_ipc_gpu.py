"""The CUDA IPC weight transport on a GPU (actors/transport/cuda_ipc.py): a handle made here opens in another
process over the same memory, and versions reach a vLLM engine whose core runs in its own process on the
same GPU, exactly (the smoke's weights stage, which runs every transport the one GPU allows). Needs CUDA;
skipped elsewhere. On CPU the transport is refused: tests/unit/test_actors_transport_cuda_ipc.py.

    .venv/bin/python -m pytest -m gpu -s tests/integration/test_cuda_ipc_gpu.py
    .venv/bin/python bench/cuda_ipc.py              # the 3.09 GB set's seconds a version
"""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.integration]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _sum_in_child(handle: str, out) -> None:
    import torch

    from actors.transport.ipc_handles import open_handle

    tensor = open_handle(handle, 0)
    out.put(int(tensor.to(torch.int64).sum()))


@needs_cuda
def test_a_handle_opens_over_the_same_memory_in_another_process():
    from actors.transport.ipc_handles import handle_of

    buf = torch.arange(1 << 20, dtype=torch.int64, device="cuda").to(torch.uint8)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_sum_in_child, args=(handle_of(buf), out))
    child.start()
    try:
        assert out.get(timeout=120) == int(buf.to(torch.int64).sum())
    finally:
        child.join(60)


@needs_cuda
def test_versions_reach_an_engine_on_the_same_gpu_exactly(tmp_path):
    from launch.ops.smoke.context import Context
    from launch.ops.smoke.engine_stages import weights_stage

    ctx = Context(device="cuda", work=tmp_path, steps=1)
    try:
        assert "cuda_ipc" in ctx.smoke_transports()
        figures = weights_stage(ctx)
    finally:
        ctx.close()
    ipc = figures["transports"]["cuda_ipc"]
    assert ipc["checksum_perturbed"] != ipc["checksum_before"]
    assert ipc["checksum_restored"] == pytest.approx(ipc["checksum_before"], rel=1e-9)
    print(f"[cuda_ipc] tiny model: {ipc['seconds']:.3f} s, back {ipc['back_seconds']:.3f} s a version")
