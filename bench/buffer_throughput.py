"""Buffer throughput vs raw redis-py on the same bytes (target: buffer/raw >= 0.8 at 4K tokens).

    .venv/bin/python bench/buffer_throughput.py --groups 64                 # gs 16, 4096-token responses
    .venv/bin/python bench/buffer_throughput.py --groups 32 --tokens 1024,4096,16384

Both paths move the same groups through a private embedded redis-server (AOF on, started and
stopped here) in windows of ``--window`` groups: write the window, then read it back in batches
of ``--batch`` and ACK each batch.

* buffer: ``put_group`` (encode + Lua: backpressure check, XADD, counters) then ``take_groups``
  (XREADGROUP, decode + validate, consumed-set check) and ``ack_groups`` (Lua: XACK, consumed
  set, gauge; periodic trim).
* raw: XADD of the already-encoded payload, XREADGROUP, XACK: the floor any Redis-stream
  design pays, with no encoding, validation or bookkeeping.

MB/s counts payload bytes (one write plus one read of each group). After one warm-up pass of
each path, the paths alternate ``--repeats`` times and the fastest pass of each counts (other
processes on a shared machine only ever slow a pass down); the ratio of the medians is printed
beside it as a stability check. CPU ms/group (this process plus
redis-server, from INFO cpu) is printed too: it is much less sensitive to such contention.
Retention keeps every group during a pass (memory is freed after the timer, as for raw).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=64, help="groups moved per measurement")
    p.add_argument("--tokens", default="4096", help="response length(s) in tokens, comma-separated")
    p.add_argument("--group-size", type=int, default=16, help="responses per group (gs)")
    p.add_argument("--window", type=int, default=32, help="groups written before they are read back")
    p.add_argument("--batch", type=int, default=16,
                   help="groups per take/XREADGROUP (the learner takes a mini-batch: D_T = 16..64)")
    p.add_argument("--repeats", type=int, default=7, help="measurements per path; the best counts")
    p.add_argument("--appendfsync", default="everysec", choices=["always", "everysec", "no"])
    return p.parse_args()


class Meter:
    """Wall time, and CPU time of this process and of the redis-server (INFO cpu)."""

    def __init__(self, url: str):
        from buffer.server import connect

        self.admin = connect(url)

    def _server_cpu(self) -> float:
        info = self.admin.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def __enter__(self) -> Meter:
        self.wall, self.cpu, self.server = time.perf_counter(), time.process_time(), self._server_cpu()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu + self._server_cpu() - self.server


def run_buffer(url: str, groups: list, window: int, batch: int) -> Meter:
    from buffer import BufferConfig, RunBuffer

    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    buf = RunBuffer.from_url(url, run_id, BufferConfig(max_unconsumed_groups=max(window, 1),
                                                       retention_groups=len(groups)))
    with Meter(url) as meter:
        for lo in range(0, len(groups), window):
            chunk = groups[lo: lo + window]
            for g in chunk:
                buf.put_group(g)
            got = 0
            while got < len(chunk):
                taken = buf.take_groups("learner", batch, block_ms=1000)
                buf.ack_groups([e for e, _ in taken], [g.group_id for _, g in taken])
                got += len(taken)
    buf.client.delete(*buf.keys.all())
    buf.close()
    return meter


def run_raw(url: str, payloads: list[bytes], window: int, batch: int) -> Meter:
    from buffer.server import connect

    client = connect(url)
    key = f"bench-raw-{uuid.uuid4().hex[:8]}:groups"
    client.xgroup_create(key, "learner", id="0", mkstream=True)
    with Meter(url) as meter:
        for lo in range(0, len(payloads), window):
            chunk = payloads[lo: lo + window]
            for payload in chunk:
                client.xadd(key, {b"data": payload})
            got = 0
            while got < len(chunk):
                reply = client.xreadgroup("learner", "learner", {key: ">"}, count=batch, block=1000)
                entries = reply[0][1] if reply else []
                client.xack(key, "learner", *[e for e, _ in entries])
                got += len(entries)
    client.delete(key)
    client.close()
    return meter


def main() -> int:
    args = parse_args()
    from buffer.samples import make_group
    from buffer.schema import encode_group
    from buffer.server import EmbeddedRedis

    token_sizes = [int(t) for t in args.tokens.split(",")]
    print(f"buffer throughput: {args.groups} groups x gs {args.group_size}, window {args.window}, "
          f"batch {args.batch}, best of {args.repeats}, appendfsync {args.appendfsync}")
    print(f"{'tokens':>7} {'MB/group':>9} {'path':>7} {'groups/s':>9} {'MB/s':>8} {'CPU ms/group':>13} "
          f"{'ratio':>6} {'CPU ratio':>10}")
    ratios, medians = {}, {}
    with tempfile.TemporaryDirectory(prefix="lagrl-bench-") as tmp, \
            EmbeddedRedis(tmp, args.appendfsync, stop_at_exit=True) as server:
        for tokens in token_sizes:
            groups = [make_group(f"g{i}", n=args.group_size, tokens=tokens, seed=i) for i in range(args.groups)]
            payloads = [encode_group(g) for g in groups]
            mb = sum(map(len, payloads)) / 1e6
            runs = {"raw": lambda: run_raw(server.url, payloads, args.window, args.batch),
                    "buffer": lambda: run_buffer(server.url, groups, args.window, args.batch)}
            for run in runs.values():             # warm-up: script cache, allocator, page cache
                run()
            walls, cpus = {p: [] for p in runs}, {p: [] for p in runs}
            for _ in range(args.repeats):          # alternate, so load drift hits both alike
                for path, run in runs.items():
                    m = run()
                    walls[path].append(m.wall)
                    cpus[path].append(m.cpu)
            wall = {p: min(v) for p, v in walls.items()}
            cpu = {p: min(v) for p, v in cpus.items()}
            ratios[tokens] = (wall["raw"] / wall["buffer"], cpu["raw"] / cpu["buffer"])
            medians[tokens] = (statistics.median(walls["raw"]) / statistics.median(walls["buffer"]),
                               statistics.median(cpus["raw"]) / statistics.median(cpus["buffer"]))
            for path in runs:
                t = wall[path]
                print(f"{tokens:>7} {mb / args.groups:>9.2f} {path:>7} {args.groups / t:>9.1f} "
                      f"{2 * mb / t:>8.1f} {1e3 * cpu[path] / args.groups:>13.2f} "
                      f"{wall['raw'] / t:>6.2f} {cpu['raw'] / cpu[path]:>10.2f}")
    key = 4096 if 4096 in ratios else token_sizes[0]
    wall_ratio, cpu_ratio = ratios[key]
    def verdict(r: float) -> str:
        return "meets" if r >= 0.8 else "BELOW"

    print("ratio buffer/raw (wall | CPU): " + ", ".join(f"{t} tokens {w:.2f} | {c:.2f}" for t, (w, c) in ratios.items())
          + f"  -> target 0.80 at {key} tokens: wall {verdict(wall_ratio)}, CPU {verdict(cpu_ratio)}")
    print("  median of passes (wall | CPU): "
          + ", ".join(f"{t} tokens {w:.2f} | {c:.2f}" for t, (w, c) in medians.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
