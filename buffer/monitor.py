"""Read-only view of runs for notebooks: safe to call while training runs.

Never writes, by construction: every command goes through :class:`ReadOnlyRedis`, which refuses
anything outside a whitelist of read commands (no XREADGROUP either: it would move the
learner's consumer group). Reads are XRANGE/XREVRANGE/HGETALL-sized, so a notebook polling
every few seconds costs the server next to nothing.

    from buffer.monitor import Monitor, list_runs
    list_runs(url)                        # ['run-20250101-120000', ...]
    mon = Monitor(url, run_id)
    mon.version(); mon.metrics(since_id="-"); mon.lag_histogram(); mon.actors()
    mon.recent_groups(2)                  # decoded with the tokenizer from the run's meta hash
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from redis.client import Pipeline

from buffer.codec import decode_group
from buffer.connection import connect
from buffer.deadletter import decode_entry
from buffer.keys import PAYLOAD, RunKeys, run_id_of
from buffer.messages import Group, InvalidMessage
from buffer.streams import read_counts
from buffer.telemetry import decode_heartbeats, decode_meta, decode_metrics_entry
from buffer.versions import lag_histogram

READ_COMMANDS = frozenset({
    "PING", "GET", "MGET", "EXISTS", "TYPE", "SCAN", "DBSIZE", "INFO", "HGET", "HMGET", "HGETALL",
    "HLEN", "HKEYS", "SCARD", "SISMEMBER", "SMISMEMBER", "ZCARD", "XLEN", "XRANGE", "XREVRANGE",
    "XINFO", "XPENDING", "XREAD",
})
TOKENIZER_META_KEYS = ("tokenizer_path", "tokenizer", "model_path")


class ReadOnlyRedis(redis.Redis):
    """A client that raises PermissionError on any command not in READ_COMMANDS."""

    def execute_command(self, *args, **options):
        _check_read(args)
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = False, shard_hint=None) -> Pipeline:
        return _ReadOnlyPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class _ReadOnlyPipeline(Pipeline):
    def execute_command(self, *args, **kwargs):
        _check_read(args)
        return super().execute_command(*args, **kwargs)


def _check_read(args: tuple) -> None:
    name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    if name.split()[0].upper() not in READ_COMMANDS:
        raise PermissionError(f"monitor is read-only: {name} refused")


def read_only_client(client_or_url: redis.Redis | str) -> ReadOnlyRedis:
    client = connect(client_or_url) if isinstance(client_or_url, str) else client_or_url
    return client if isinstance(client, ReadOnlyRedis) else ReadOnlyRedis(connection_pool=client.connection_pool)


def list_runs(client_or_url: redis.Redis | str) -> list[str]:
    """Run ids with a buffer on this server (those that have a groups or prompts stream, or meta)."""
    client = read_only_client(client_or_url)
    runs = set()
    for pattern in ("*:groups", "*:prompts", "*:meta"):
        for key in client.scan_iter(match=pattern, count=1000):
            run_id = run_id_of(key)
            if run_id:
                runs.add(run_id)
    return sorted(runs)


class Monitor:
    def __init__(self, client_or_url: redis.Redis | str, run_id: str):
        self.client = read_only_client(client_or_url)
        self.keys = RunKeys(run_id)
        self._tokenizers: dict[str, Any] = {}

    def version(self) -> dict:
        """{"version", "location", "time"} of the learner's last publish (version 0 before any)."""
        v, loc, t = self.client.hmget(self.keys.version, ["version", "location", "time"])
        return {"version": int(v or 0), "location": (loc or b"").decode(), "time": float(t or 0.0)}

    def meta(self) -> dict:
        return decode_meta(self.client.hgetall(self.keys.meta))

    def counts(self) -> dict:
        return read_counts(self.client, self.keys)

    def metrics(self, since_id: str = "-", count: int | None = None) -> list[dict]:
        """Metrics rows after ``since_id`` (exclusive; "-" = from the start), oldest first.

        Each row is the learner's dict plus ``id`` (pass the last one back to poll for new rows).
        """
        start = "-" if since_id in ("-", "0", "0-0", "") else f"({since_id}"
        return [decode_metrics_entry(eid, fields)
                for eid, fields in self.client.xrange(self.keys.metrics, min=start, count=count)]

    def lag_histogram(self, source: str = "auto", since_id: str = "-", last_groups: int = 64,
                      key: str = "lag/hist") -> dict[int, int]:
        """lag -> number of responses.

        ``metrics``: the sum of the rows' ``key`` histograms since ``since_id`` (what the learner
        trained on). ``groups``: the ``last_groups`` newest groups against the current version
        (how stale the data waiting now is). ``auto``: metrics if any row has ``key``.
        """
        if source in ("auto", "metrics"):
            total: dict[int, int] = {}
            for row in self.metrics(since_id):
                for lag, n in _hist_items(row.get(key)):
                    total[lag] = total.get(lag, 0) + n
            if total or source == "metrics":
                return dict(sorted(total.items()))
        groups = [g for _, g in self._recent(last_groups)]
        return lag_histogram(groups, self.version()["version"])

    def actors(self) -> dict[str, dict]:
        """actor_id -> last heartbeat (decoded) with ``age_s``."""
        return decode_heartbeats(self.client.hgetall(self.keys.actors))

    def dead_letters(self, count: int = 100) -> list[dict]:
        return [decode_entry(eid, f) for eid, f in reversed(self.client.xrevrange(self.keys.deadletter, count=count))]

    def recent_groups(self, count: int = 4, tokenizer: Any = None, skip_special_tokens: bool = False) -> list[dict]:
        """The ``count`` newest groups, newest first, decoded to text.

        ``tokenizer``: a Hugging Face tokenizer, a path to one, or None for the run's meta
        ``tokenizer_path`` (then ``model_path``). Without any, or when the meta's path is not on this
        machine (a cluster run's model directory elsewhere), rows carry token ids only.
        """
        tok = self._tokenizer(tokenizer)

        def text(ids) -> str | None:
            return tok.decode(ids.tolist(), skip_special_tokens=skip_special_tokens) if tok is not None else None

        rows = []
        for entry_id, group in self._recent(count):
            rows.append({
                "id": entry_id, "group_id": group.group_id, "step": group.step, "stage": group.stage,
                "actor_id": group.actor_id, "data_source": group.data_source, "answer": group.answer,
                "prompt": text(group.prompt_ids), "prompt_ids": group.prompt_ids,
                "responses": [{"text": text(r.token_ids), "token_ids": r.token_ids, "reward": r.reward,
                               "finish_reason": r.finish_reason, "length": r.length,
                               "version_start": r.version_start, "version_end": r.version_end,
                               "reward_info": r.reward_info} for r in group.responses],
            })
        return rows

    def _recent(self, count: int) -> list[tuple[str, Group]]:
        out = []
        for eid, fields in self.client.xrevrange(self.keys.groups, count=count):
            try:
                out.append((eid.decode(), decode_group(fields.get(PAYLOAD, b""))))
            except InvalidMessage:
                continue   # the learner dead-letters it; the monitor just shows valid groups
        return out

    def _tokenizer(self, tokenizer: Any):
        if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
            return tokenizer
        path = str(tokenizer) if tokenizer is not None else None
        if path is None:
            meta = self.meta()
            path = next((str(meta[k]) for k in TOKENIZER_META_KEYS if meta.get(k)), None)
            if path is not None and not Path(path).exists():   # the run's model dir is not on this machine
                return None                                    # (another node of a cluster): ids only
        if path is None:
            return None
        if path not in self._tokenizers:
            self._tokenizers[path] = load_tokenizer(path)
        return self._tokenizers[path]


def load_tokenizer(path: str | Path):
    """A decoder for ``path``: the fast tokenizer's ``tokenizer.json`` through the light
    ``tokenizers`` library when present (no transformers import: seconds saved in a notebook),
    else ``transformers.AutoTokenizer``. Both offer ``decode(ids, skip_special_tokens=...)``."""
    path = Path(path)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path / "tokenizer.json"))
    from transformers import AutoTokenizer  # heavy: only when text is asked for

    return AutoTokenizer.from_pretrained(str(path))


def _hist_items(hist: Any) -> list[tuple[int, int]]:
    """A histogram as stored by the learner: {lag: n} (int or str keys) or [n_at_lag0, n_at_lag1, ...]."""
    if isinstance(hist, dict):
        return [(int(k), int(v)) for k, v in hist.items()]
    if isinstance(hist, (list, tuple)):
        return [(i, int(v)) for i, v in enumerate(hist) if v]
    return []
