"""The read-only monitor against a live buffer: what a notebook sees, and that it never writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from buffer import BufferConfig, RunBuffer
from buffer.monitor import Monitor, list_runs
from bench.synthetic import make_group

pytestmark = pytest.mark.integration


@pytest.fixture
def live(redis_server, run_id):
    """A run mid-training: 3 groups written, 1 consumed, version 2, two learner steps, one actor."""
    buf = RunBuffer.from_url(redis_server.url, run_id, BufferConfig())
    for i in range(3):
        buf.put_group(make_group(f"g{i}", n=2, tokens=3, version=i, seed=i))
    taken = buf.take_groups("learner", 1, block_ms=0)
    buf.ack_groups([e for e, _ in taken], [g.group_id for _, g in taken])
    buf.publish_version(2, "ray://v2")
    buf.write_metrics({"step": 0, "lag/hist": {0: 2}, "entropy/mean": np.float32(0.7)})
    buf.write_metrics({"step": 1, "lag/hist": {"0": 1, "1": 3}})
    buf.heartbeat("actor-0", {"version": 2, "tokens_per_s": 123.0})
    yield buf
    buf.close()


class CharTokenizer:
    """Decodes id i to chr(ord('a') + i % 26): enough to see ids become text."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def test_lists_runs_and_reads_state(live, redis_server, run_id):
    assert run_id in list_runs(redis_server.url)
    mon = Monitor(redis_server.url, run_id)
    assert mon.version()["version"] == 2 and mon.version()["location"] == "ray://v2"
    c = mon.counts()
    assert (c["groups_written"], c["groups_consumed"], c["groups_unconsumed"]) == (3, 1, 2)
    [actor] = mon.actors().items()
    assert actor[0] == "actor-0" and actor[1]["version"] == 2 and 0 <= actor[1]["age_s"] < 60


def test_metrics_rows_since_an_id(live, redis_server, run_id):
    mon = Monitor(redis_server.url, run_id)
    rows = mon.metrics()
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["entropy/mean"] == pytest.approx(0.7)
    assert all("id" in r and "schema" not in r for r in rows)
    assert mon.metrics(since_id=rows[-1]["id"]) == []
    live.write_metrics({"step": 2})
    assert [r["step"] for r in mon.metrics(since_id=rows[-1]["id"])] == [2]


def test_lag_histograms(live, redis_server, run_id):
    mon = Monitor(redis_server.url, run_id)
    assert mon.lag_histogram() == {0: 3, 1: 3}                        # summed over metrics rows
    # from the newest groups against the current version 2: versions 0, 1, 2 -> lags 2, 1, 0
    assert mon.lag_histogram(source="groups") == {0: 2, 1: 2, 2: 2}


def test_recent_groups_decoded_to_text(live, redis_server, run_id, tmp_path):
    mon = Monitor(redis_server.url, run_id)
    rows = mon.recent_groups(2, tokenizer=CharTokenizer())
    assert [r["group_id"] for r in rows] == ["g2", "g1"]              # newest first
    r0 = rows[0]["responses"][0]
    assert r0["text"] == CharTokenizer().decode(r0["token_ids"].tolist()) and r0["length"] == 3
    assert mon.recent_groups(1)[0]["prompt"] is None                 # no tokenizer known: ids only
    # default: the tokenizer path from the run's meta hash (a real tokenizer.json)
    from tokenizers import Tokenizer, models

    vocab = {chr(ord("a") + i): i for i in range(26)}
    Tokenizer(models.WordLevel(vocab, unk_token="a")).save(str(tmp_path / "tokenizer.json"))
    live.set_meta(tokenizer_path=str(tmp_path))
    g = make_group("tok", n=1, tokens=0, seed=0)
    g.responses[0].token_ids = np.array([7, 8], dtype=np.int32)
    g.responses[0].logprobs = np.array([-1.0, -2.0], dtype=np.float32)
    live.put_group(g)
    assert mon.recent_groups(1)[0]["responses"][0]["text"].replace(" ", "") == "hi"


def test_monitor_never_writes(live, redis_server, run_id):
    client = live.client
    before = (client.execute_command("DEBUG", "DIGEST"), client.xinfo_groups(live.keys.groups),
              client.xpending(live.keys.groups, "learner"))
    mon = Monitor(redis_server.url, run_id)
    mon.version(), mon.meta(), mon.counts(), mon.metrics(), mon.lag_histogram(), mon.lag_histogram(source="groups")
    mon.actors(), mon.dead_letters(), mon.recent_groups(3), list_runs(mon.client)
    after = (client.execute_command("DEBUG", "DIGEST"), client.xinfo_groups(live.keys.groups),
             client.xpending(live.keys.groups, "learner"))
    assert before == after
    with pytest.raises(PermissionError):
        mon.client.set("x", "y")
    with pytest.raises(PermissionError):
        mon.client.xreadgroup("learner", "spy", {live.keys.groups: ">"})
    with pytest.raises(PermissionError):
        mon.client.pipeline().hset(live.keys.meta, "x", json.dumps(1)).execute()
