"""Waiting without polling (real redis-server): stream tails + XREAD wake a waiter at once, the version
watch sees a publish without a read of its own, the learner's need wakes the feeder's signals stream."""

from __future__ import annotations

import threading
import time

import pytest

from buffer import RunBuffer
from buffer.wake import stream_tails, wait_for_entries

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
