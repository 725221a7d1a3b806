"""Weight sync per version: the collective transport and the Ray object store vs the bare link.

    .venv/bin/python bench/weight_sync.py                           # CPU (gloo): tiny model + Qwen2.5-1.5B-sized
    .venv/bin/python bench/weight_sync.py --sets tiny --receivers 2
    .venv/bin/python bench/weight_sync.py --device cuda             # learner on cuda:0, receivers cuda:1..
                                                                    # (NCCL); one GPU: all on cuda:0 (gloo)

For each weight set (``tiny``: the tiny world's model, fp32; ``qwen1.5b``: random tensors with the
shapes of Qwen2.5-1.5B, bf16, 3.1 GB) it prints bytes per version and seconds per version of:

- ``link``: one raw broadcast (gloo on CPU, NCCL on CUDA) of one flat buffer of the same size
  between the same processes: the floor, giving the measured link bandwidth;
- ``collective``: one published version through ``actors.transport.collective`` from this
  process (learner rank 0) into spawned receivers: hub handshake, bucketed broadcasts, lagrl's
  vLLM weight-transfer engine receive path (into a sink model: no vLLM engine), done;
- ``object store``: ``RayObjectStoreTransport.publish`` (CPU copies, ``ray.put``) and one Ray actor
  per receiver fetching the version (``ray.get``), as an actor does before loading.

and the ratio of each to bytes / link bandwidth (1.0 = as fast as the bare broadcast).
Median of ``--repeats`` versions after one warm-up, in each of ``--rounds`` paired rounds (link, then
each path, interleaved); the median ratio over the rounds is printed with its spread and the target.

On CUDA, receiver r runs on ``cuda:{r % GPUs}``. NCCL cannot put two ranks on one GPU, so with fewer
GPUs than learner + receivers (one GPU: everything on cuda:0) the backend is gloo (``--backend auto``),
as the one-GPU layout's runs use: buckets staged through host memory, the link a host broadcast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import multiprocessing as mp
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TARGET_RATIO = 1.5        # issue 32: the collective at 3.1 GB within 1.5x the raw link (median of >= 3 rounds)
TARGET_FIXED_MS = 10.0    # ... and the tiny set's fixed cost over the link under 10 ms
QWEN25_15B = dict(vocab=151936, hidden=1536, intermediate=8960, layers=28, kv_dim=256)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["tiny", "qwen1.5b"], choices=["tiny", "qwen1.5b"])
    ap.add_argument("--paths", nargs="+", default=["collective", "object_store"], choices=["collective", "object_store"])
    ap.add_argument("--receivers", type=int, default=1, help="engines receiving each version")
    ap.add_argument("--repeats", type=int, default=5, help="timed versions per path (after 1 warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds (link, then each path); the ratio's "
                    "median and spread over them are printed")
    ap.add_argument("--bucket-mb", type=int, default=0, help="collective bucket size (0 = the transport's default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                    help="auto: nccl when the learner and every receiver have a GPU of their own, else gloo")
    args = ap.parse_args()
    args.gpus = _gpu_count() if args.device == "cuda" else 0
    if args.device == "cuda" and not args.gpus:
        ap.error("--device cuda: no CUDA device visible")
    own_gpus = args.gpus >= args.receivers + 1
    if args.backend == "auto":
        args.backend = "nccl" if args.device == "cuda" and own_gpus else "gloo"
    if args.backend == "nccl" and not (args.device == "cuda" and own_gpus):
        ap.error(f"--backend nccl needs --device cuda and a GPU per rank ({args.receivers + 1}), "
                 f"found {args.gpus}: NCCL cannot run two ranks on one GPU; use --backend gloo")
    return args


def _gpu_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def weight_set(name: str, device: str):
    import torch

    if name == "tiny":
        from transformers import AutoModelForCausalLM

        from launch.worlds.tiny.build import ensure_tiny_world
        model = AutoModelForCausalLM.from_pretrained(ensure_tiny_world().model_dir, dtype=torch.float32)
        return [(n, p.detach().to(device)) for n, p in model.named_parameters()]
    q = QWEN25_15B
    h, i = q["hidden"], q["intermediate"]
    shapes = [("model.embed_tokens.weight", (q["vocab"], h))]
    for k in range(q["layers"]):
        p = f"model.layers.{k}."
        shapes += [(p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.q_proj.bias", (h,)),
                   (p + "self_attn.k_proj.weight", (q["kv_dim"], h)), (p + "self_attn.k_proj.bias", (q["kv_dim"],)),
                   (p + "self_attn.v_proj.weight", (q["kv_dim"], h)), (p + "self_attn.v_proj.bias", (q["kv_dim"],)),
                   (p + "self_attn.o_proj.weight", (h, h)), (p + "mlp.gate_proj.weight", (i, h)),
                   (p + "mlp.up_proj.weight", (i, h)), (p + "mlp.down_proj.weight", (h, i)),
                   (p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
    shapes.append(("model.norm.weight", (h,)))      # lm_head is tied to the embedding (not sent)
    if device == "meta":
        return [(n, torch.empty(s, device="meta", dtype=torch.bfloat16)) for n, s in shapes]
    g = torch.Generator(device=device).manual_seed(0)
    return [(n, torch.randn(s, generator=g, device=device, dtype=torch.bfloat16)) for n, s in shapes]


# ---- link: one flat buffer, raw broadcast ------------------------------------------------------------
def _link_group(port: int, rank: int, world: int, device: str):
    import torch
    import torch.distributed as dist

    from actors.transport.channel import open_channel
    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                          timeout=dt.timedelta(seconds=600))
    return open_channel(backend_of(device), store, 0, rank, world, 600, torch.device(device))


def backend_of(link_device: str) -> str:
    """The link's backend from where its buffers live: NCCL on CUDA, gloo (host memory) otherwise."""
    return "nccl" if link_device.startswith("cuda") else "gloo"


def link_device(args, device: str) -> str:
    """Where a member's link buffer lives: its GPU under NCCL; host memory under gloo (the path the
    gloo transport takes: it stages every bucket through host memory)."""
    return device if args.backend == "nccl" else "cpu"


def link_member(port: int, rank: int, world: int, nbytes: int, repeats: int, device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    channel = _link_group(port, rank, world, device)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    for _ in range(repeats + 1):
        channel.broadcast(buf)


def measure_link(nbytes: int, args, ctx) -> list[float]:
    import torch
    import torch.distributed as dist

    from actors.transport.channel import open_channel
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=dt.timedelta(seconds=600))
    world = args.receivers + 1
    procs = [ctx.Process(target=link_member, args=(store.port, r, world, nbytes, args.repeats,
                                                   link_device(args, _rx_device(args, r))))
             for r in range(1, world)]
    for p in procs:
        p.start()
    dev = link_device(args, "cuda:0" if args.device == "cuda" else "cpu")
    channel = open_channel(backend_of(dev), store, 0, 0, world, 600, torch.device(dev))
    buf = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    times = []
    for k in range(args.repeats + 1):
        t = time.perf_counter()
        channel.broadcast(buf)
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        if k:
            times.append(time.perf_counter() - t)
    for p in procs:
        p.join(600)
    del buf, channel
    return times


def _rx_device(args, rank: int) -> str:
    """Rank ``rank``'s device: GPUs dealt round-robin (one GPU: every rank on cuda:0)."""
    return f"cuda:{rank % args.gpus}" if args.device == "cuda" else "cpu"


# ---- collective -----------------------------------------------------------------------------------------
def measure_collective(params, args, ctx) -> tuple[list[float], int, list[float]]:
    from actors.transport.config import CollectiveConfig
    from actors.transport import make_transport
    from bench.stub_members import member_main

    cfg = CollectiveConfig(backend=args.backend, bucket_mb=args.bucket_mb or None, join_timeout_s=600,
                           collective_timeout_s=600)
    transport = make_transport("collective", "bench", cfg=cfg)
    bound = transport.bind_learner(0, "127.0.0.1", args.device)
    names = [f"rx-{r}" for r in range(args.receivers)]
    procs = [ctx.Process(target=member_main, args=(bound, n, None, False, False, _rx_device(args, r + 1)), daemon=True)
             for r, n in enumerate(names)]
    for p in procs:
        p.start()
    while set(names) - set(transport.learner_status()["live"]):
        time.sleep(0.1)
    times, sent, splits = [], 0, []
    for v in range(args.repeats + 1):
        t = time.perf_counter()
        transport.publish(params, v)
        out = transport.after_announce(params)
        elapsed = time.perf_counter() - t
        assert out["errors"] == 0 and out["members"] == args.receivers, out
        if v:
            times.append(elapsed)
            splits.append((out["ready_s"], out["broadcast_s"], out["done_s"]))
            sent = out["bytes"]
    transport._sender.hub.store.set("test/stop", "1")
    for p in procs:
        p.join(30)
    return times, sent, [statistics.median(c) for c in zip(*splits)]


# ---- object store -----------------------------------------------------------------------------------------
def measure_object_store(params, args) -> list[float]:
    import ray

    from actors.transport.object_store import RayObjectStoreTransport
    from actors.cluster.priority import SYSTEM_CONFIG

    @ray.remote(num_cpus=0)
    class Fetcher:
        def __init__(self, transport, device: str):
            self.transport, self.device = transport, device

        def fetch(self, location: str) -> int:
            tensors = self.transport.fetch(location)
            n = sum(t.to(self.device).numel() * t.element_size() for _, t in tensors)
            del tensors
            gc.collect()
            return n

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=int(sum(t.numel() * t.element_size() for _, t in params) * 2.2) + (256 << 20),
             log_to_driver=False, _system_config=SYSTEM_CONFIG)
    try:
        transport = RayObjectStoreTransport("bench", keep=1)
        fetchers = [Fetcher.options(num_gpus=_fetcher_gpus(args)).remote(
            transport, "cuda" if args.device == "cuda" else "cpu") for _ in range(args.receivers)]
        times = []
        for v in range(args.repeats + 1):
            t = time.perf_counter()
            location = transport.publish(params, v)
            got = ray.get([f.fetch.remote(location) for f in fetchers])
            if v:
                times.append(time.perf_counter() - t)
            assert len(set(got)) == 1
            gc.collect()
        return times
    finally:
        ray.shutdown()


def _fetcher_gpus(args) -> float:
    """A GPU per fetcher while there are enough, else equal shares (one GPU: all of them on it)."""
    if args.device != "cuda":
        return 0
    return 1.0 if args.gpus >= args.receivers else int(100 * args.gpus / args.receivers) / 100


def main() -> None:
    args = parse()
    import torch
    ctx = mp.get_context("spawn")
    print(f"device {args.device} ({args.gpus} GPUs, backend {args.backend}), receivers {args.receivers} on "
          f"{[_rx_device(args, r + 1) for r in range(args.receivers)]}, repeats {args.repeats} "
          "(median; after 1 warm-up), "
          f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}", flush=True)
    for name in args.sets:
        dev = "cuda:0" if args.device == "cuda" else "cpu"
        shapes = weight_set(name, "meta")              # sizes only: the link is measured before the weights exist
        nbytes = sum(t.numel() * t.element_size() for _, t in shapes)
        dtype = str(shapes[0][1].dtype).removeprefix("torch.")
        print(f"\n{name}: {len(shapes)} tensors, {nbytes / 1e6:.1f} MB per version ({dtype})", flush=True)
        ratios, over_link = {}, {}       # per path: ratio to the link, seconds over it
        for r in range(args.rounds):                   # link and paths interleaved, round by round
            link = statistics.median(measure_link(nbytes, args, ctx))
            params = weight_set(name, dev)
            print(f"  round {r + 1}: {'link (raw broadcast)':<22} {link:8.3f} s/version  "
                  f"{nbytes / link / 1e6:8.0f} MB/s", flush=True)
            if "collective" in args.paths:
                times, sent, (ready, bcast, done) = measure_collective(params, args, ctx)
                s = statistics.median(times)
                ratios.setdefault("collective", []).append(s / link)
                over_link.setdefault("collective", []).append(s - link)
                print(f"  round {r + 1}: {'collective':<22} {s:8.3f} s/version  {nbytes / s / 1e6:8.0f} MB/s   ratio "
                      f"{s / link:.2f}  (best {min(times):.3f} s; {sent / 1e6:.1f} MB broadcast; ready "
                      f"{ready * 1e3:.0f} ms, broadcast {bcast * 1e3:.0f} ms, done {done * 1e3:.0f} ms)", flush=True)
            gc.collect()
            if "object_store" in args.paths:
                try:
                    times = measure_object_store(params, args)
                except Exception as exc:        # e.g. Ray's OOM killer: three CPU copies of a 3 GB version
                    first = str(exc).strip().splitlines()[0][:200]
                    print(f"  round {r + 1}: {'object store':<22} failed: {type(exc).__name__}: {first}", flush=True)
                else:
                    s = statistics.median(times)
                    ratios.setdefault("object store", []).append(s / link)
                    print(f"  round {r + 1}: {'object store':<22} {s:8.3f} s/version  {nbytes / s / 1e6:8.0f} MB/s   "
                          f"ratio {s / link:.2f}  (best {min(times):.3f} s)", flush=True)
            del params
            gc.collect()
        for path, rs in ratios.items():
            target = f"; target <= {TARGET_RATIO}" if path == "collective" and name == "qwen1.5b" else ""
            print(f"  {name} {path}: ratio to the link, median {statistics.median(rs):.2f} over {len(rs)} round(s) "
                  f"(spread {min(rs):.2f}-{max(rs):.2f}){target}", flush=True)
        if name == "tiny" and "collective" in over_link:
            ms = [x * 1e3 for x in over_link["collective"]]
            print(f"  tiny collective: fixed cost over the link {statistics.median(ms):.1f} ms median "
                  f"(spread {min(ms):.1f}-{max(ms):.1f}); target < {TARGET_FIXED_MS} ms", flush=True)


if __name__ == "__main__":
    main()
