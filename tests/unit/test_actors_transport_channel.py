"""The data plane on gloo with a spawned peer: every wait is bounded, and a new generation works after
a failed one (same hub, new key prefix). Packing round-trips through vLLM's packed layout."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import time

import pytest
import torch
import torch.distributed as dist

from actors.transport import ParamMeta
from actors.transport.channel import GlooChannel, bucket_nbytes, pack, unpack

TIMEOUT_S = 2.0


def _peer(port: int) -> None:
    from vllm.distributed.utils import init_gloo_process_group  # noqa: F401  (slow import, before the clock)

    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                          timeout=dt.timedelta(seconds=30))
    store.set("peer/up", "1")
    store.wait(["root/up"], dt.timedelta(seconds=120))
    silent = GlooChannel(store, 1, 1, 2, TIMEOUT_S)         # generation 1: joins, then never broadcasts
    store.wait(["root/gen2"], dt.timedelta(seconds=60))
    channel = GlooChannel(store, 2, 1, 2, TIMEOUT_S)        # generation 2: receives one buffer
    del silent
    buf = torch.empty(1 << 20, dtype=torch.uint8)
    channel.broadcast(buf)
    store.set("peer/got", str(int(buf.sum())))
    # generations 3 and 4: never joins


def test_silent_and_absent_peers_time_out_and_a_new_generation_works():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=dt.timedelta(seconds=30))
    peer = mp.get_context("spawn").Process(target=_peer, args=(store.port,), daemon=True)
    peer.start()
    try:
        from vllm.distributed.utils import init_gloo_process_group  # noqa: F401  (slow import, before the clock)

        store.set("root/up", "1")
        store.wait(["peer/up"], dt.timedelta(seconds=120))
        silent = GlooChannel(store, 1, 0, 2, TIMEOUT_S)
        data = torch.ones(1 << 20, dtype=torch.uint8)
        t0 = time.monotonic()
        try:
            silent.broadcast(data)                          # 1 MB: the send waits for the receiver
            raise AssertionError("broadcast to a silent peer returned")
        except RuntimeError as exc:
            assert "Timed out" in str(exc) or "timeout" in str(exc).lower()
        assert TIMEOUT_S - 0.5 < time.monotonic() - t0 < TIMEOUT_S + 5
        silent.close()

        store.set("root/gen2", "1")
        GlooChannel(store, 2, 0, 2, TIMEOUT_S).broadcast(data)
        store.wait(["peer/got"], dt.timedelta(seconds=30))
        assert int(store.get("peer/got")) == 1 << 20

        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=r"gloo group 3 set-up \(rank 0 of 2\): ranks \[1\] did not arrive"):
            GlooChannel(store, 3, 0, 2, TIMEOUT_S)          # the peer never arrives
        assert TIMEOUT_S - 0.5 < time.monotonic() - t0 < TIMEOUT_S + 5

        def tick():                                         # e.g. the learner finds the peer's heartbeat stale
            if time.monotonic() - t0 > 0.4:
                raise RuntimeError("peer is dead")
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="peer is dead"):
            GlooChannel(store, 4, 0, 2, 300.0, tick=tick)
        assert time.monotonic() - t0 < 2.0                  # not the 300 s timeout
    finally:
        peer.join(30)
        if peer.is_alive():
            peer.kill()


def test_pack_unpack_round_trip_and_single_tensor_is_not_copied():
    tensors = [("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)), ("b", torch.tensor([1.5, -2.0],
               dtype=torch.bfloat16)), ("c", torch.arange(5, dtype=torch.int64))]
    meta = [ParamMeta(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in tensors]
    buf = pack(tensors)
    assert buf.dtype == torch.uint8 and buf.numel() == bucket_nbytes(meta) == 24 + 4 + 40
    for (n, t), (m, u) in zip(tensors, unpack(buf.clone(), meta)):
        assert n == m and u.dtype == t.dtype and torch.equal(u, t)
    single = torch.randn(4, 4)
    assert pack([("w", single)]).data_ptr() == single.data_ptr()      # sent as a view of itself


def test_receive_buffers_are_reused_once_nothing_refers_to_them():
    """A bucket's buffer comes back for the next bucket only when no view of it is alive (vLLM's
    layerwise reload keeps views until a layer is complete); the pool holds at most ``keep``."""
    from actors.transport.channel import ReceiveBuffers

    cpu = torch.device("cpu")
    pool = ReceiveBuffers(keep=2)
    first = pool.take(1000, cpu, capacity=4096)
    first_ptr = first.data_ptr()
    held = first[10:20].view(torch.int16)             # a view the loader keeps
    del first
    second = pool.take(1000, cpu, capacity=4096)
    assert second.data_ptr() != first_ptr             # the first is still referred to
    del second
    del held
    third = pool.take(4096, cpu)                      # nothing refers to the first now; it fits
    assert third.data_ptr() == first_ptr and third.numel() == 4096
    extra = [pool.take(4096, cpu) for _ in range(3)]  # beyond keep: fresh, not pooled
    assert len(pool._pool) == 2 and len({t.data_ptr() for t in extra}) == 3
    assert pool.take(100, torch.device("meta")).device.type == "meta"   # not a host buffer: not pooled
