"""CUDA IPC weight hand-over on one GPU: seconds a version for Qwen2.5-1.5B's weight set (target <= 0.3 s).

    .venv/bin/python bench/cuda_ipc.py                  # needs CUDA; refuses on CPU
    .venv/bin/python bench/cuda_ipc.py --set tiny       # the tiny world's shapes: the fixed cost

The learner side is ``actors.transport.cuda_ipc``'s own publish, in this process: the version copied into
the staging buffer on the GPU, its turn taken on the board (a named Ray actor). The engine side runs in a
spawned process on the same GPU, as a vLLM worker would: it opens the handle once and copies every
parameter of each version from the buffer's views into tensors of its own (what ``load_weights`` does
with them, without vLLM); it is told each version through a queue, not the board (two Ray calls, ~2 ms). A version's time is from publish to the receiver's copies done; the median of
``--repeats`` versions after one warm-up, and the link's floor beside it (one device-to-device copy of
the same bytes).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TARGET_S = 0.3
QWEN25_15B = dict(vocab=151936, hidden=1536, intermediate=8960, layers=28, kv_dim=256)


def shapes(which: str) -> list[tuple[str, tuple[int, ...]]]:
    if which == "tiny":
        return [("embed", (262, 128)), *((f"l{i}.w", (128, 384)) for i in range(6))]
    q = QWEN25_15B
    out = [("model.embed_tokens.weight", (q["vocab"], q["hidden"]))]
    for i in range(q["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "q", (q["hidden"], q["hidden"])), (p + "kv", (2 * q["kv_dim"], q["hidden"])),
                (p + "o", (q["hidden"], q["hidden"])), (p + "gate_up", (2 * q["intermediate"], q["hidden"])),
                (p + "down", (q["hidden"], q["intermediate"]))]
    return out


def receiver(handle: str, plan_json, offsets, requests, done) -> None:
    """A worker on the same GPU: open the handle once, copy each version's parameters out of the buffer."""
    import torch

    from actors.transport.channel import bucket_nbytes, plan_from_json, unpack
    from actors.transport.ipc_handles import open_handle

    plan, buf, params = plan_from_json(plan_json), open_handle(handle, 0), {}
    while (version := requests.get()) is not None:
        for bucket, offset in zip(plan, offsets):
            for n, t in unpack(buf[offset:offset + bucket_nbytes(bucket)], bucket):
                if n not in params:
                    params[n] = torch.empty_like(t)
                params[n].copy_(t)
        torch.cuda.synchronize()
        done.put(version)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=["qwen1.5b", "tiny"], default="qwen1.5b")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import ray
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/cuda_ipc.py needs CUDA: the CUDA IPC transport hands GPU memory over in place")
    from actors.transport.channel import plan_buckets, plan_to_json
    from actors.transport.cuda_ipc import CudaIpcTransport
    from actors.transport.shm import BUCKET_BYTES, bucket_offsets
    from actors.transport import TensorListSource

    ray.init(namespace="lagrl-bench", include_dashboard=False)
    weights = [(n, torch.randn(s, dtype=torch.bfloat16, device="cuda")) for n, s in shapes(args.set)]
    nbytes = sum(t.numel() * t.element_size() for _, t in weights)
    run_id = f"bench-{os.getpid()}"
    sender = CudaIpcTransport(run_id).bind_learner(0, "127.0.0.1", "cuda")
    plan = plan_buckets(TensorListSource(weights).metadata(), BUCKET_BYTES)
    offsets, _ = bucket_offsets(plan)
    ctx = mp.get_context("spawn")
    requests, done = ctx.Queue(), ctx.Queue()
    sender.publish(weights, 0)                                  # the buffer and its handle exist from here
    child = ctx.Process(target=receiver, args=(sender.staging_handle(), plan_to_json(plan), offsets, requests, done))
    child.start()
    times = []
    try:
        for version in range(1, args.repeats + 2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            sender.publish(weights, version)
            requests.put(version)
            assert done.get(timeout=600) == version
            times.append(time.perf_counter() - t0)
    finally:
        requests.put(None)
        child.join(60)
    flat = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    flat.copy_(torch.cat([t.reshape(-1).view(torch.uint8) for _, t in weights]))
    torch.cuda.synchronize()
    floor = time.perf_counter() - t0
    med = statistics.median(times[1:])
    print(f"{torch.cuda.get_device_name(0)}: {args.set} {nbytes / 1e9:.2f} GB a version: cuda_ipc median {med:.3f} s "
          f"(spread {min(times[1:]):.3f}-{max(times[1:]):.3f}) over {len(times) - 1} versions; one on-device copy "
          f"{floor:.3f} s -> target <= {TARGET_S} s: {'meets' if med <= TARGET_S else 'BELOW'}")


if __name__ == "__main__":
    main()
