"""The audit's books against a real redis-server: they balance on every legal path and show a loss."""

from __future__ import annotations

import pytest

from buffer import BufferConfig, RunBuffer
from buffer.audit import audit
from buffer.codec import encode_group, encode_prompt
from buffer.keys import PAYLOAD
from bench.synthetic import make_group, make_prompt
from tests.samples import tamper

pytestmark = pytest.mark.integration


@pytest.fixture
def buf(redis_server, run_id):
    b = RunBuffer.from_url(redis_server.url, run_id, BufferConfig(
        reclaim_idle_ms=100, trim_every=1, retention_groups=2, retention_prompts=2))
    yield b
    b.close()


def test_books_balance_through_every_outcome(buf):
    buf.put_prompts([make_prompt(f"p{i}", seed=i) for i in range(8)])
    buf.client.xadd(buf.keys.prompts, {PAYLOAD: tamper(encode_prompt(make_prompt("bad")), schema=99)})
    taken = buf.take_prompts("actor-0", 9, block_ms=0)              # the bad one is dead-lettered here
    assert len(taken) == 8
    for (entry_id, p) in taken[:6]:
        assert buf.put_group(make_group(p.prompt_id), entry_id)
    assert buf.put_group(make_group(taken[0][1].prompt_id), taken[0][0]) == ""   # late duplicate: dropped
    buf.client.xadd(buf.keys.groups, {PAYLOAD: encode_group(make_group("p1"))})  # same group id twice
    buf.client.xadd(buf.keys.groups, {PAYLOAD: b"\x00not msgpack"})              # corrupt

    got = buf.take_groups("learner", 10, block_ms=0)
    assert sorted(g.group_id for _, g in got) == [f"p{i}" for i in range(6)]
    outcomes = ["trained", "trained", "filtered", "stale", "already_trained", "trained"]
    for (entry_id, g), outcome in zip(got, outcomes):
        buf.ack_groups([entry_id], [g.group_id], outcome)

    a = audit(buf.client, buf.run_id)
    print(a.line())
    assert (a.prompts_issued, a.prompts_answered, a.prompts_deadlettered, a.prompts_open) == (8, 6, 1, 2)
    assert (a.groups_written, a.groups_consumed, a.groups_deadlettered, a.groups_open) == (6, 6, 1, 0)
    assert (a.groups_duplicate_skipped, a.groups_duplicate_dropped, a.duplicates) == (1, 1, 0)
    assert a.outcomes == {"trained": 3, "filtered": 1, "stale": 1, "already_trained": 1, "evaluated": 0}
    # entries XADDed by hand (not through put_prompts/put_group) show as negative losses
    assert a.groups_lost == -2 and a.prompts_lost == -1

    buf.ack_groups([], [])                                          # a no-op, counted nowhere
    buf.trim()                                                      # trimming keeps the books
    assert audit(buf.client, buf.run_id) == a


def test_a_deleted_prompt_shows_as_lost_and_a_second_consumption_as_duplicate(buf):
    ids = buf.put_prompts([make_prompt(f"p{i}", seed=i) for i in range(3)])
    buf.client.xdel(buf.keys.prompts, ids[0])                       # an entry vanishing behind our back
    [(e1, p1), (e2, p2)] = buf.take_prompts("actor-0", 3, block_ms=0)
    buf.put_group(make_group(p1.prompt_id), e1)
    buf.put_group(make_group(p2.prompt_id), e2)
    got = buf.take_groups("learner", 2, block_ms=0)
    buf.ack_groups([got[0][0]], [got[0][1].group_id])
    buf.ack_groups([got[1][0]], [got[0][1].group_id])               # a consumer bug: same group id
    a = audit(buf.client, buf.run_id)
    assert a.prompts_lost == 1 and a.duplicates == 1 and not a.balanced
