"""Waiting without polling (real redis-server): stream tails + XREAD wake a waiter at once, the version
watch sees a publish without a read of its own, the learner's need wakes the feeder's signals stream,
the stream watch says which prompt stream grew."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from buffer import RunBuffer
from buffer.wake import StreamWatch, stream_tails, wait_for_entries

pytestmark = pytest.mark.integration


@pytest.fixture
def buf(redis_server, run_id):
    buffer = RunBuffer.from_url(redis_server.url, run_id)
    yield buffer
    buffer.close()


def _later(seconds: float, fn) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), fn()), daemon=True)
    t.start()
    return t


def test_an_entry_after_the_tails_wakes_the_waiter_and_none_times_out(buf):
    keys = [buf.keys.versions, buf.keys.signals]
    tails = stream_tails(buf.client, keys)
    assert tails == {k: b"0-0" for k in keys}                  # missing streams
    t0 = time.monotonic()
    assert not wait_for_entries(buf.client, tails, 150)       # nothing appended: the timeout
    assert time.monotonic() - t0 >= 0.14
    _later(0.1, lambda: buf.announce_meta(learner_need={"step": 0, "groups": 3, "lost": 1, "time": 1.0}))
    t0 = time.monotonic()
    assert wait_for_entries(buf.client, tails, 5000)
    assert time.monotonic() - t0 < 2.0                         # woken, not timed out
    assert buf.get_meta("learner_need")["learner_need"]["lost"] == 1
    # an entry appended between taking the tails and waiting is not missed
    tails = stream_tails(buf.client, keys)
    buf.publish_version(1, "test://weights/1")
    t0 = time.monotonic()
    assert wait_for_entries(buf.client, tails, 5000) and time.monotonic() - t0 < 1.0


def test_version_watch_follows_publishes_without_a_read(buf):
    watch = buf.watch_version()
    try:
        assert watch.latest()[0] == 0
        _later(0.1, lambda: buf.publish_version(3, "test://weights/3"))
        deadline = time.monotonic() + 5.0
        while watch.latest()[0] != 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watch.latest() == (3, "test://weights/3") and watch.error == ""
    finally:
        watch.stop()


def _until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_stream_watch_marks_the_stream_that_grew_once(buf):
    from buffer.messages import PromptMsg

    other = f"{buf.keys.prompts}:other"
    watch = StreamWatch(buf.client, [buf.keys.prompts, other])
    try:
        assert watch.grew(buf.keys.prompts) and watch.grew(other)       # marked at the start: read once
        assert not watch.grew(buf.keys.prompts) and not watch.grew(other)
        time.sleep(0.2)
        assert not watch.grew(buf.keys.prompts)                         # nothing appended, nothing marked
        buf.put_prompts([PromptMsg(prompt_id="p0", data_source="t", prompt_ids=np.arange(3, dtype=np.int32), answer="1",
                                  n_samples=2, max_tokens=4, step=0, min_version=0)])
        assert _until(lambda: watch.grew(buf.keys.prompts))
        assert not watch.grew(other) and not watch.grew(buf.keys.prompts)   # once per growth, that stream only
        buf.client.xadd(other, {"x": "1"})
        buf.client.xadd(other, {"x": "2"})
        assert _until(lambda: watch.grew(other)) and watch.error == ""
    finally:
        watch.stop()


def test_stream_watch_marks_every_stream_when_its_reads_fail(buf):
    """A Redis error in the thread (here: the watched key becomes a hash, not a stream) marks them all:
    the caller then reads each time, never too late."""
    broken = f"{buf.keys.prompts}:not-a-stream"
    watch = StreamWatch(buf.client, [broken], block_ms=100)     # its next XREAD meets the hash
    try:
        assert watch.grew(broken) and not watch.grew(broken)
        buf.client.hset(broken, "k", "v")
        buf.client.xadd(buf.keys.prompts, {"x": "1"})      # not watched: only the error can mark it
        assert _until(lambda: watch.error != "")
        assert watch.grew(broken)
        assert _until(lambda: watch.grew(broken), 2.0)                  # marked again on the next failure
    finally:
        watch.stop()


def test_stream_watch_calls_on_grow_after_its_tails_and_again_once_redis_answers_after_an_error(buf):
    """``on_grow`` (VersionWatch re-reads the version hash there) runs once the tails are taken, after
    each growth, and after an error once the stream answers again: a reader is never left behind."""
    key = f"{buf.keys.prompts}:grow"
    calls = []
    watch = StreamWatch(buf.client, [key], block_ms=100, on_grow=lambda: calls.append(time.monotonic()))
    try:
        assert len(calls) == 1                                          # at the start, before any read
        buf.client.xadd(key, {"x": "1"})
        assert _until(lambda: len(calls) == 2)
        buf.client.delete(key)
        buf.client.hset(key, "k", "v")                                  # its reads fail now
        assert _until(lambda: watch.error != "")
        assert len(calls) == 2
        buf.client.delete(key)                                          # it answers again: tails, then on_grow
        assert _until(lambda: len(calls) == 3, 3.0)
        buf.client.xadd(key, {"x": "2"})
        assert _until(lambda: len(calls) == 4)
    finally:
        watch.stop()
