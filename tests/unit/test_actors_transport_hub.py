"""The collective transport's control plane and plans, on a real TCPStore (no vLLM, no Ray)."""

from __future__ import annotations

import time

import pytest
import torch

from actors.config import ActorConfig
from actors.transport.config import CollectiveConfig
from actors.transport import ParamMeta, TensorListSource, WeightTransferError, make_transport
from actors.transport.channel import plan_buckets, plan_from_json, plan_id, plan_to_json
from actors.transport.hub import Hub


@pytest.fixture
def hub():
    return Hub.serve("127.0.0.1", timeout_s=5.0)


def test_registrations_keep_the_latest_incarnation_in_order(hub):
    client = Hub.connect(hub.host, hub.port, 5.0)
    client.register("a", "inc1", workers=1)
    client.register("b", "inc1", workers=2)
    client.register("a", "inc2", workers=1)             # a restarted: a new member, moved to the end
    regs = hub.registrations()
    assert [(r.actor, r.inc, r.workers) for r in regs] == [("b", "inc1", 2), ("a", "inc2", 1)]


def test_live_needs_a_fresh_heartbeat_of_the_latest_incarnation(hub):
    hub.register("a", "i1", 1)
    hub.register("b", "i1", 1)
    hub.set_json("beat/b", {"inc": "i1", "t": time.time() - 10.0})     # b last reached a poll 10 s ago
    assert [r.actor for r in hub.live(stale_after_s=5.0)] == ["a"]
    assert [r.actor for r in hub.live(stale_after_s=30.0)] == ["a", "b"]
    hub.set_json("beat/a", {"inc": "old", "t": time.time()})            # a beat from a dead incarnation
    assert [r.actor for r in hub.live(stale_after_s=30.0)] == ["b"]


def test_describe_names_rank_and_heartbeat_age(hub):
    hub.set_json("beat/a", {"inc": "i", "t": time.time() - 12.0})
    assert hub.describe("a", 1).startswith("a (rank 1, last heartbeat 12.")
    assert hub.describe("ghost") == "ghost (never heartbeat)"


def test_a_dead_engine_rank_is_named_while_its_sibling_beats():
    """Tensor parallelism: during a send the actor's loop is blocked in the engine and each engine
    rank beats for itself; a member is dead once its loop and one of its ranks are silent."""
    from actors.transport.sender import CollectiveSender

    sender = CollectiveSender(CollectiveConfig(heartbeat_s=0.5, stale_after_s=3.0), "127.0.0.1", "cpu")
    hub, now = sender.hub, time.time()
    hub.register("a", "i1", workers=2)
    [member] = hub.registrations()
    sender.published(4)
    group = sender._form([member])

    def beats(loop: float, w0: float | None, w1: float | None, inc: str = "i1") -> list[int]:
        hub.set_json("beat/a", {"inc": "i1", "t": now - loop})
        for k, age in ((0, w0), (1, w1)):
            if age is None:
                hub.delete([f"beat/a/w{k}"])
            else:
                hub.set_json(f"beat/a/w{k}", {"inc": inc, "t": now - age})
        return sender._silent_workers(member)

    assert beats(loop=0.5, w0=None, w1=None) == []            # the loop beats: between engine steps
    assert beats(loop=10.0, w0=0.2, w1=0.3) == []             # receiving: both ranks beat
    assert beats(loop=10.0, w0=0.2, w1=8.0) == [1]            # rank 1 died; rank 0 does not hide it
    assert beats(loop=10.0, w0=None, w1=None) == [0, 1]       # died between "go" and its first wait
    assert beats(loop=10.0, w0=0.2, w1=0.2, inc="old") == [0, 1]   # a dead incarnation's beats
    for k in (0, 1):
        hub.beat("a", "i1", worker=k)                         # what an engine rank's tick writes
    assert sender._silent_workers(member) == []
    beats(loop=10.0, w0=0.2, w1=8.0)
    with pytest.raises(WeightTransferError) as err:
        sender._watch(group)()
    text = str(err.value)
    assert text.startswith("version 4, group 1: broadcast stalled: missing a (rank 1, last heartbeat 10.")
    assert "; worker 1 = rank 2 last beat 8." in text and "worker 0" not in text and err.value.actors == ["a"]


def test_wait_keys_returns_the_missing_and_can_give_up_early(hub):
    hub.store.set("k/a", "1")
    t0 = time.monotonic()
    assert hub.wait_keys(["k/a", "k/b", "k/c"], timeout_s=0.6) == ["k/b", "k/c"]
    assert 0.5 < time.monotonic() - t0 < 2.0
    t0 = time.monotonic()
    assert hub.wait_keys(["k/b"], timeout_s=30.0, give_up=lambda missing: missing == ["k/b"]) == ["k/b"]
    assert time.monotonic() - t0 < 2.0                   # gave up after the first slice, not 30 s
    ticks = []
    hub.wait_keys(["k/x"], timeout_s=0.8, tick=lambda: ticks.append(1), tick_s=0.2)
    assert len(ticks) >= 2
    assert hub.wait_keys(["k/a"], timeout_s=0.1) == []


def test_an_idle_member_sees_a_send_within_milliseconds_not_at_its_next_poll(hub):
    """The learner's handshake waits for every member's ready: a member that slept through the
    announcement would add its sleep to each version's fixed cost (issue 32: < 10 ms in all)."""
    import threading

    from actors.transport.receiver import CollectiveReceiver

    receiver = CollectiveReceiver(CollectiveConfig(), hub.host, hub.port, "gen-0", workers=1)
    t0 = time.monotonic()
    assert receiver.wait_for_send(0.05) is False                 # nothing announced: the whole timeout
    assert 0.05 <= time.monotonic() - t0 < 1.0
    announced = []

    def announce():
        time.sleep(0.1)
        announced.append(time.monotonic())
        hub.set_json("send", {"seq": 1, "members": []})

    threading.Thread(target=announce).start()
    assert receiver.wait_for_send(5.0) is True
    seen_after = time.monotonic() - announced[0]
    # the wait polls every <= 5 ms; the bound is loose so a loaded machine cannot fail it, and still far
    # below the 1 s an actor loop's own poll (its heartbeat) would take
    assert seen_after < 0.25, f"saw the send {seen_after * 1e3:.1f} ms after it was announced"
    receiver.seen = 1                                             # handled: the same send does not wake it again
    assert receiver.wait_for_send(0.02) is False


def test_get_json_never_blocks_and_delete(hub):
    assert hub.get_json("nothing", default={"seq": 0}) == {"seq": 0}
    hub.set_json("x", [1, 2])
    assert hub.get_json("x") == [1, 2]
    hub.delete(["x", "never-set"])
    assert not hub.has("x")


def test_plan_cuts_before_the_budget_and_round_trips():
    meta = [ParamMeta("a", "float32", (10,)),      # 40 B
            ParamMeta("b", "float32", (5,)),       # 20 B
            ParamMeta("c", "bfloat16", (30,)),     # 60 B
            ParamMeta("d", "float32", (100,)),     # 400 B: bigger than the budget, alone
            ParamMeta("e", "float16", (2, 3))]     # 12 B
    plan = plan_buckets(meta, bucket_bytes=64)
    assert [[m.name for m in b] for b in plan] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert plan_from_json(plan_to_json(plan)) == plan
    assert plan_id(plan) == plan_id(plan_from_json(plan_to_json(plan))) != plan_id(plan[:-1])
    assert plan_buckets(meta, bucket_bytes=1 << 20) == [meta]


def test_tensor_list_source_metadata_and_buckets():
    params = [("w", torch.ones(2, 3)), ("b", torch.zeros(3, dtype=torch.bfloat16))]
    src = TensorListSource(params)
    assert src.metadata() == [ParamMeta("w", "float32", (2, 3)), ParamMeta("b", "bfloat16", (3,))]
    assert src.metadata()[0].nbytes == 24 and src.metadata()[1].nbytes == 6
    [[(n1, t1), (n2, t2)]] = list(src.buckets([src.metadata()]))
    assert (n1, n2) == ("w", "b") and t1 is not None and t2.dtype == torch.bfloat16


def test_config_alias_and_bounds():
    assert ActorConfig(weight_transport="nccl").weight_transport == "collective"
    with pytest.raises(ValueError):
        ActorConfig(weight_transport="smoke-signals")
    with pytest.raises(ValueError, match="heartbeat"):
        CollectiveConfig(heartbeat_s=5.0, stale_after_s=6.0)
    with pytest.raises(ValueError):
        CollectiveConfig(bucket_mb=0)


def test_nccl_on_a_shared_gpu_is_refused_naming_the_fix():
    shared = {"num_gpus": 0.5, "gpu_memory_utilization": 0.4}
    with pytest.raises(ValueError, match=r"num_gpus=0.5 with collective.backend=nccl.*backend gloo.*--actors.num_gpus 1"):
        ActorConfig(**shared, weight_transport="collective", collective={"backend": "nccl"})
    # 'auto' is made concrete from the placement before any actor starts (launch.config.layout): gloo on a shared GPU
    for backend in ("gloo", "auto"):
        ActorConfig(**shared, weight_transport="collective", collective={"backend": backend})
    ActorConfig(**shared, weight_transport="ray")
    ActorConfig(num_gpus=2, weight_transport="nccl")


def test_unbound_collective_transport_refuses_to_attach():
    transport = make_transport("nccl", "run-x")
    assert type(transport).__name__ == "CollectiveTransport"
    with pytest.raises(WeightTransferError, match="no hub address"):
        transport.attach("actor-0", llm=None)


def test_segments_send_large_tensors_alone_and_pack_runs_of_small_ones():
    from actors.transport.channel import SOLO_BYTES, segments

    small, large = ParamMeta("s", "uint8", (10,)), ParamMeta("L", "uint8", (SOLO_BYTES,))
    assert segments([small, small, large, small, large, large]) == [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert segments([small, small]) == [(0, 2)] and segments([large]) == [(0, 1)] and segments([]) == []
