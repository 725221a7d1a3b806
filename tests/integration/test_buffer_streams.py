"""RunBuffer against a real redis-server: round trips, reclaim after a consumer dies, exactly-once
consumption, dead-lettering, backpressure, trimming, versions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from buffer import BackpressureTimeout, BufferConfig, RunBuffer
from buffer.codec import encode_group, encode_prompt, pack_logprobs
from buffer.keys import FRESH, PAYLOAD
from bench.synthetic import make_group, make_prompt
from tests.samples import tamper, tamper_response

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
IDLE_MS = 150


@pytest.fixture
def make_buf(redis_server, run_id):
    made = []

    def make(**cfg) -> RunBuffer:
        buf = RunBuffer.from_url(redis_server.url, run_id, BufferConfig(**{"reclaim_idle_ms": IDLE_MS, **cfg}))
        made.append(buf)
        return buf

    yield make
    for buf in made:
        buf.close()


def _ack(buf: RunBuffer, batch) -> None:
    buf.ack_groups([e for e, _ in batch], [g.group_id for _, g in batch])


def _ids(buf: RunBuffer, key: str) -> list[str]:
    return [e.decode() for e, _ in buf.client.xrange(key)]


def test_group_round_trip_bit_exact(make_buf):
    buf = make_buf()
    group = make_group("g0", n=16, tokens=[1, 7, 1024] + [300] * 13, version=3, seed=1)
    entry_id = buf.put_group(group)
    assert buf.client.xrange(buf.keys.groups)[0][1][PAYLOAD] == encode_group(group)   # stored as is
    [(got_id, back)] = buf.take_groups("learner", 8, block_ms=0)
    assert got_id == entry_id and encode_group(back) == encode_group(group)
    for a, b in zip(group.responses, back.responses):
        assert a.token_ids.tobytes() == b.token_ids.tobytes() and a.logprobs.tobytes() == b.logprobs.tobytes()


def test_prompt_flow_acks_prompt_iff_group_stored(make_buf):
    buf = make_buf()
    ids = buf.put_prompts([make_prompt(f"p{i}", seed=i) for i in range(3)])
    taken = buf.take_prompts("actor-0", 2, block_ms=0)
    assert [e for e, _ in taken] == ids[:2]
    assert buf.take_prompts("actor-0", 5, block_ms=0)[0][0] == ids[2]
    start = time.monotonic()
    assert buf.take_prompts("actor-0", 5, block_ms=0) == [] and time.monotonic() - start < 1.0   # no BLOCK 0
    (e0, p0), (e1, p1) = taken
    assert buf.put_group(make_group(p0.prompt_id), e0)
    c = buf.counts()
    assert (c["prompts_issued"], c["groups_written"], c["prompts_pending"]) == (3, 1, 2)


def test_dead_actor_prompt_reclaimed_and_late_duplicate_dropped(make_buf):
    buf = make_buf()
    [entry] = buf.put_prompts([make_prompt("p0")])
    assert buf.take_prompts("actor-dead", 1, block_ms=0)[0][0] == entry
    assert buf.take_prompts("actor-1", 1, block_ms=0) == []        # not idle long enough yet
    time.sleep(IDLE_MS / 1000 + 0.05)
    [(again, prompt)] = buf.take_prompts("actor-1", 1, block_ms=0)
    assert again == entry and prompt.prompt_id == "p0"
    assert buf.put_group(make_group("p0", actor_id="actor-1"), entry)
    # the "dead" actor was only slow: its late answer to the same prompt is dropped, not stored
    assert buf.put_group(make_group("p0", actor_id="actor-dead"), entry) == ""
    c = buf.counts()
    assert (c["groups_written"], c["groups_duplicate_dropped"], c["prompts_pending"]) == (1, 1, 0)


def test_touch_keeps_a_slow_prompt_from_being_reclaimed(make_buf):
    buf = make_buf()
    [entry] = buf.put_prompts([make_prompt("p0")])
    buf.take_prompts("actor-slow", 1, block_ms=0)
    for _ in range(3):
        time.sleep(IDLE_MS / 2000)
        buf.touch_prompts("actor-slow", [entry])
    assert buf.take_prompts("actor-1", 1, block_ms=0) == []


LEARNER = textwrap.dedent("""
    import sys, time
    from buffer import RunBuffer
    buf = RunBuffer.from_url(sys.argv[1], sys.argv[2])
    got = buf.take_groups("learner-A", 10, block_ms=5000)
    print(",".join(e for e, _ in got), flush=True)
    time.sleep(600)
""")


def test_learner_killed_before_ack_then_another_consumer_gets_the_groups(make_buf, redis_server, run_id):
    buf = make_buf()
    written = [buf.put_group(make_group(f"g{i}", seed=i)) for i in range(3)]
    child = subprocess.Popen([sys.executable, "-c", LEARNER, redis_server.url, run_id], cwd=REPO,
                             stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        taken = child.stdout.readline().decode().strip().split(",")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert taken == written
    assert buf.take_groups("learner-B", 10, block_ms=0) == []       # delivered to A, not new
    time.sleep(IDLE_MS / 1000 + 0.05)
    reclaimed = buf.reclaim_groups("learner-B")
    assert [e for e, _ in reclaimed] == written
    _ack(buf, reclaimed)
    c = buf.counts()
    assert (c["groups_consumed"], c["groups_pending"], c["groups_unconsumed"]) == (3, 0, 0)
    assert buf.reclaim_groups("learner-B", min_idle_ms=0) == []


def test_no_duplicates_after_reclaim(make_buf):
    a, b = make_buf(), make_buf()
    e0 = a.put_group(make_group("g0"))
    a.put_group(make_group("g1"))
    [(first, _)] = a.take_groups("learner-A", 1, block_ms=0)        # A takes g0 and stalls
    time.sleep(IDLE_MS / 1000 + 0.05)
    reclaimed = b.reclaim_groups("learner-B")
    assert [e for e, _ in reclaimed] == [e0]
    _ack(b, reclaimed)
    assert b.is_consumed("g0")
    a.ack_groups([first], ["g0"])                                    # the zombie's late ACK: no-op
    a.put_group(make_group("g0"))                                    # a second copy of g0 arrives
    got = b.take_groups("learner-B", 10, block_ms=0)
    assert [g.group_id for _, g in got] == ["g1"]                    # the copy is skipped
    _ack(b, got)
    assert a.pending_groups("learner-A") == [] and b.pending_groups("learner-B") == []
    c = b.counts()
    assert (c["groups_written"], c["groups_consumed"], c["groups_duplicate_skipped"]) == (3, 2, 1)
    assert (c["groups_unconsumed"], c["consumed_ids"]) == (0, 2)


def _smismember_calls(buf: RunBuffer) -> int:
    return int(buf.client.info("commandstats").get("cmdstat_smismember", {}).get("calls", 0))


def test_only_a_new_group_id_is_written_fresh(make_buf):
    """put_group marks an entry FRESH iff its group id is neither consumed nor already in the stream."""
    buf = make_buf()
    buf.put_group(make_group("g0"))
    buf.put_group(make_group("g0"))                                  # second copy while the first is unread
    fresh = lambda: [FRESH in fields for _, fields in buf.client.xrange(buf.keys.groups)]   # noqa: E731
    assert fresh() == [True, False]
    assert buf.client.smembers(buf.keys.fresh) == {b"g0"}
    _ack(buf, buf.take_groups("learner", 10, block_ms=0))
    assert buf.client.scard(buf.keys.fresh) == 0                     # consumed: no longer fresh
    buf.put_group(make_group("g0"))                                  # a copy after consumption
    assert fresh() == [True, False, False]
    assert buf.take_groups("learner", 10, block_ms=0) == []          # skipped (checked: consumed)
    c = buf.counts()
    assert (c["groups_written"], c["groups_consumed"], c["groups_duplicate_skipped"]) == (3, 1, 2)


def test_first_delivery_of_fresh_entries_skips_the_consumed_check(make_buf):
    buf = make_buf()
    for i in range(4):
        buf.put_group(make_group(f"g{i}", seed=i))
    before = _smismember_calls(buf)
    taken = buf.take_groups("learner", 10, block_ms=0)
    assert len(taken) == 4 and _smismember_calls(buf) == before      # no round trip to the consumed set
    assert [e for e, _ in buf.pending_groups("learner")] == [e for e, _ in taken]
    assert _smismember_calls(buf) == before + 1                      # a re-read is checked


def test_unmarked_copy_of_a_consumed_group_is_skipped_in_a_later_take(make_buf):
    """A copy that bypassed put_group (no FRESH mark) is checked against the consumed set."""
    buf = make_buf()
    buf.put_group(make_group("g0"))
    _ack(buf, buf.take_groups("learner", 10, block_ms=0))
    buf.client.xadd(buf.keys.groups, {PAYLOAD: encode_group(make_group("g0"))})
    assert buf.take_groups("learner", 10, block_ms=0) == []
    assert buf.counts()["groups_duplicate_skipped"] == 1


def test_ack_counts_a_group_trained_twice_across_and_within_calls(make_buf):
    """The audit's canary: an effective 'trained' ACK of a group id already consumed, whether by
    an earlier ACK or earlier in the same batch; a repeated ACK counts nothing."""
    buf = make_buf()
    for _ in range(3):                                               # copies that bypassed put_group
        buf.client.xadd(buf.keys.groups, {PAYLOAD: encode_group(make_group("g0"))})
    ids = [e.id for e in buf._groups.queue.read_new("learner", 10, 0)]
    buf.ack_groups(ids[:1], ["g0"])
    buf.ack_groups(ids[1:], ["g0", "g0"])
    buf.ack_groups(ids, ["g0"] * 3)                                  # retried: no longer pending
    twice = lambda: int(buf.client.hget(buf.keys.counters, "groups_consumed_twice") or 0)   # noqa: E731
    assert twice() == 2
    c = buf.counts()
    assert (c["groups_consumed"], c["groups_unconsumed"], c["consumed_ids"]) == (3, 0, 1)   # gauge clamped at 0


def test_restarted_learner_gets_its_pending_groups_back(make_buf):
    buf = make_buf()
    written = [buf.put_group(make_group(f"g{i}", seed=i)) for i in range(4)]
    taken = buf.take_groups("learner", 3, block_ms=0)
    _ack(buf, taken[:1])
    restarted = make_buf()                                           # same consumer name, new process state
    assert [e for e, _ in restarted.pending_groups("learner")] == written[1:3]
    assert [e for e, _ in restarted.take_groups("learner", 10, block_ms=0)] == written[3:]
    pos = restarted.stream_position()
    assert (pos["last_delivered_id"], pos["pending"], pos["consumed"]) == (written[3], 3, 1)


def test_every_bad_group_is_dead_lettered_with_its_reason(make_buf):
    buf = make_buf(max_message_bytes=64 << 10)
    good = encode_group(make_group("good", n=2, tokens=8))
    bad = {
        "malformed_msgpack": b"\xc1\x00garbage",
        "unknown_schema": tamper(good, schema=42),
        "bad_field": tamper(good, step="seven"),
        "length_mismatch": tamper_response(good, logprobs=pack_logprobs([-1.0] * 7)),
        "nonfinite_logprobs": tamper_response(good, logprobs=pack_logprobs([float("nan")] + [-1.0] * 7)),
        "oversize": encode_group(make_group("huge", n=2, tokens=20_000)),
    }
    inf = tamper_response(good, logprobs=pack_logprobs([float("-inf")] + [-1.0] * 7))
    for payload in [*bad.values(), inf, good]:
        buf.client.xadd(buf.keys.groups, {PAYLOAD: payload})
    buf.client.xadd(buf.keys.groups, {"other": "field"})             # no payload at all
    got = buf.take_groups("learner", 20, block_ms=0)
    assert [g.group_id for _, g in got] == ["good"]                  # never a crash
    letters = buf.dead_letters()
    reasons = [d["reason"] for d in letters]
    assert reasons == [*bad, "nonfinite_logprobs", "missing_payload"]
    assert all(d["source"] == "groups" and d["entry_id"] and d["detail"] for d in letters[1:])
    assert letters[0]["raw"] == bad["malformed_msgpack"]
    assert letters[len(bad) - 1]["raw_len"] == len(bad["oversize"])
    c = buf.counts()
    assert (c["groups_deadlettered"], c["groups_pending"]) == (len(bad) + 2, 1)   # rejects ACKed


def test_bad_prompts_are_dead_lettered_and_acked(make_buf):
    buf = make_buf()
    good = encode_prompt(make_prompt("p"))
    for payload in [b"\x91\x01", tamper(good, schema=0), tamper(good, n_samples="4"), good]:
        buf.client.xadd(buf.keys.prompts, {PAYLOAD: payload})
    got = buf.take_prompts("actor-0", 10, block_ms=0)
    assert [p.prompt_id for _, p in got] == ["p"]
    assert [d["reason"] for d in buf.dead_letters()] == ["not_a_map", "unknown_schema", "bad_field"]
    c = buf.counts()
    assert (c["prompts_deadlettered"], c["prompts_pending"]) == (3, 1)


def test_oversize_group_at_put_is_dead_lettered_and_its_prompt_answered(make_buf):
    buf = make_buf(max_message_bytes=4096, deadletter_raw_bytes=1000)
    [entry] = buf.put_prompts([make_prompt("p0")])
    buf.take_prompts("actor-0", 1, block_ms=0)
    group = make_group("p0", n=4, tokens=1000)
    assert buf.put_group(group, entry) == ""
    [letter] = buf.dead_letters()
    assert (letter["source"], letter["reason"]) == ("put_group", "oversize") and letter["raw_len"] > 4096
    assert letter["raw_len"] == len(encode_group(group)) and letter["raw"] == encode_group(group)[:1000]
    c = buf.counts()
    assert (c["prompts_pending"], c["prompts_deadlettered"], c["groups_written"]) == (0, 1, 0)


def test_put_groups_has_every_outcome_of_put_group_in_order(make_buf):
    """One round trip for several groups: stored, a late duplicate answer dropped, an oversize one
    dead-lettered with its prompt answered, a group with no prompt; the books as after single puts."""
    limit = 2 * len(encode_group(make_group("p0")))
    buf = make_buf(max_message_bytes=limit, deadletter_raw_bytes=100)
    entries = buf.put_prompts([make_prompt(f"p{i}", seed=i) for i in range(4)])
    buf.take_prompts("actor-0", 4, block_ms=0)
    first = buf.put_group(make_group("p1"), entries[1])
    items = [(make_group("p0"), entries[0]), (make_group("p1", actor_id="actor-late"), entries[1]),
             (make_group("p2", n=8, tokens=1000), entries[2]), (make_group("p3", seed=3), entries[3]),
             (make_group("free", seed=4), None)]
    ids = buf.put_groups(items)
    assert ids[1] == ids[2] == "" and all(ids[i] for i in (0, 3, 4)), ids
    assert _ids(buf, buf.keys.groups) == [first, ids[0], ids[3], ids[4]]
    [letter] = buf.dead_letters()
    assert (letter["source"], letter["reason"]) == ("put_group", "oversize")
    c = buf.counts()
    assert (c["prompts_pending"], c["prompts_deadlettered"], c["groups_written"], c["groups_duplicate_dropped"]) \
        == (0, 1, 4, 1)
    taken = buf.take_groups("learner", 8, block_ms=0)
    assert [e for e, _ in taken] == [first, ids[0], ids[3], ids[4]]
    for (_, back), sent in zip(taken[1:], (items[0][0], items[3][0], items[4][0])):
        assert encode_group(back) == encode_group(sent)                 # stored as is


def test_put_groups_waits_for_room_where_none_is_left_and_reloads_flushed_scripts(make_buf):
    buf = make_buf(max_unconsumed_groups=2, backpressure_timeout_s=10)
    buf.client.script_flush()                     # as after a server restart: every EVALSHA fails once
    result = {}
    groups = [make_group(f"g{i}", seed=i) for i in range(3)]
    producer = threading.Thread(target=lambda: result.setdefault("ids", buf.put_groups([(g, None) for g in groups])))
    producer.start()
    time.sleep(0.3)
    assert producer.is_alive() and buf.counts()["groups_len"] == 2       # two stored, the third waits
    learner = make_buf()
    _ack(learner, learner.take_groups("learner", 1, block_ms=0))
    producer.join(5)
    assert not producer.is_alive() and len(set(result["ids"])) == 3 and all(result["ids"])
    assert buf.counts()["groups_written"] == 3


def test_operator_dead_letter_and_reasons_are_kept(make_buf):
    buf = make_buf()
    buf.dead_letter("feeder", "prompt_too_long", detail="p7: 900 + 200 > 1024")
    [d] = buf.dead_letters()
    assert (d["source"], d["reason"], d["detail"]) == ("feeder", "prompt_too_long", "p7: 900 + 200 > 1024")


def test_poison_group_dead_lettered_after_max_deliveries(make_buf):
    buf = make_buf(max_deliveries=2)
    entry = buf.put_group(make_group("poison"))
    buf.take_groups("l1", 1, block_ms=0)                              # delivery 1
    time.sleep(IDLE_MS / 1000 + 0.05)
    assert [e for e, _ in buf.reclaim_groups("l2")] == [entry]        # delivery 2
    time.sleep(IDLE_MS / 1000 + 0.05)
    assert buf.reclaim_groups("l3") == []                             # delivery 3: poison
    assert [d["reason"] for d in buf.dead_letters()] == ["too_many_deliveries"]
    assert buf.counts()["groups_pending"] == 0


def test_backpressure_waits_then_times_out_clearly(make_buf):
    buf = make_buf(max_unconsumed_groups=2, backpressure_timeout_s=0.3)
    buf.put_group(make_group("g0"))
    buf.put_group(make_group("g1"))
    start = time.monotonic()
    with pytest.raises(BackpressureTimeout, match="max_unconsumed_groups"):
        buf.put_group(make_group("g2"))
    assert 0.3 <= time.monotonic() - start < 2.0
    assert buf.counts()["groups_len"] == 2                             # nothing trimmed or dropped
    # a waiting producer proceeds as soon as the learner consumes one
    slow = make_buf(max_unconsumed_groups=2, backpressure_timeout_s=10)
    result = {}
    producer = threading.Thread(target=lambda: result.setdefault("id", slow.put_group(make_group("g2"))))
    producer.start()
    time.sleep(0.2)
    assert producer.is_alive()
    _ack(buf, buf.take_groups("learner", 1, block_ms=0))
    producer.join(5)
    assert result["id"] and buf.counts()["groups_unconsumed"] == 2


def test_trim_keeps_unconsumed_and_the_last_retention_consumed(make_buf):
    buf = make_buf(retention_groups=1, retention_prompts=0, trim_every=10_000)
    ids = [buf.put_group(make_group(f"g{i}", seed=i)) for i in range(8)]
    taken = buf.take_groups("learner", 5, block_ms=0)                 # g0..g4 delivered
    _ack(buf, [taken[i] for i in (0, 1, 3, 4)])                        # g2 stays pending
    buf.trim()
    assert _ids(buf, buf.keys.groups) == ids[2:]   # only g0, g1 go
    _ack(buf, [taken[2]])
    buf.trim()
    assert _ids(buf, buf.keys.groups) == ids[4:]   # keeps g4 (retention 1) + undelivered
    assert [g.group_id for _, g in buf.take_groups("learner", 10, block_ms=0)] == ["g5", "g6", "g7"]
    # prompts: answered ones are trimmed, unanswered ones stay
    pids = buf.put_prompts([make_prompt(f"p{i}") for i in range(3)])
    [(e0, p0), _] = buf.take_prompts("actor", 2, block_ms=0)
    buf.put_group(make_group(p0.prompt_id), e0)
    buf.trim()
    assert _ids(buf, buf.keys.prompts) == pids[1:]


def test_trim_runs_automatically_and_bounds_the_stream(make_buf):
    buf = make_buf(retention_groups=3, trim_every=4)
    for i in range(12):
        buf.put_group(make_group(f"g{i}", n=1, tokens=4))
        _ack(buf, buf.take_groups("learner", 1, block_ms=0))
    assert buf.client.xlen(buf.keys.groups) <= 3 + 4
    assert buf.client.zcard(buf.keys.group_stream.acked) == buf.client.xlen(buf.keys.groups)


def test_versions_atomic_monotonic_and_waitable(make_buf):
    buf, learner = make_buf(), make_buf()
    assert buf.get_version() == (0, "")
    learner.publish_version(1, "ray://v1")
    assert buf.get_version() == (1, "ray://v1")
    with pytest.raises(ValueError, match="current 1"):
        learner.publish_version(0, "ray://v0")
    learner.publish_version(1, "ray://v1-again")                      # a restarted learner may re-publish
    assert buf.get_version() == (1, "ray://v1-again")
    start = time.monotonic()
    assert buf.wait_for_version(2, timeout_s=0.2) == 1 and time.monotonic() - start >= 0.2
    timer = threading.Timer(0.2, learner.publish_version, args=(2, "ray://v2"))
    timer.start()
    start = time.monotonic()
    assert buf.wait_for_version(2, timeout_s=5) == 2
    assert time.monotonic() - start < 1.5                              # woken by the publish, not a poll
    timer.join()


def test_version_history_is_capped_and_a_waiter_still_wakes(make_buf):
    """Thousands of publishes (a long off-policy run) keep a bounded history, and ``wait`` still
    wakes on the next publish after the stream has been trimmed under it."""
    from buffer.versions import VERSION_HISTORY_MAXLEN

    buf, n = make_buf(), 3 * VERSION_HISTORY_MAXLEN
    for v in range(1, n + 1):
        buf.publish_version(v, f"ray://v{v}")
    assert buf.get_version() == (n, f"ray://v{n}")
    # MAXLEN ~ trims whole radix-tree nodes (100 entries each by default): at most one node over the cap
    assert VERSION_HISTORY_MAXLEN <= buf.client.xlen(buf.keys.versions) <= VERSION_HISTORY_MAXLEN + 100
    timer = threading.Timer(0.2, buf.publish_version, args=(n + 1, "ray://next"))
    timer.start()
    assert buf.wait_for_version(n + 1, timeout_s=5) == n + 1
    timer.join()


def test_meta_metrics_heartbeat_round_trip(make_buf):
    buf = make_buf()
    buf.set_meta(config={"lr": 1e-6, "steps": 3}, model_path="/m", tokenizer_path="/t")
    assert buf.get_meta() == {"config": {"lr": 1e-6, "steps": 3}, "model_path": "/m", "tokenizer_path": "/t"}
    assert buf.get_meta("model_path", "absent") == {"model_path": "/m"}
    entry = buf.write_metrics({"step": 1, "lag/hist": {0: 4}})
    assert entry and buf.client.xlen(buf.keys.metrics) == 1
    buf.heartbeat("actor-0", {"version": 2})
    assert buf.client.hlen(buf.keys.actors) == 1


def test_pending_entry_deleted_by_hand_is_dead_lettered_not_lost_silently(make_buf):
    buf = make_buf()
    ids = buf.put_prompts([make_prompt("a"), make_prompt("b")])
    buf.take_prompts("actor-dead", 2, block_ms=0)
    buf.client.xdel(buf.keys.prompts, ids[0])                        # an operator's XDEL
    time.sleep(IDLE_MS / 1000 + 0.05)
    got = buf.take_prompts("actor-1", 5, block_ms=0)
    assert [p.prompt_id for _, p in got] == ["b"]
    [letter] = buf.dead_letters()
    assert (letter["reason"], letter["entry_id"]) == ("deleted_entry", ids[0])
    assert buf.counts()["prompts_pending"] == 1                        # only "b", now with actor-1
