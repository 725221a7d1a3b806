"""Buffer knobs: where Redis lives, how much may pile up, what is kept for audit."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BufferConfig(BaseModel):
    """Every knob of the Redis buffer (DESIGN.md §2, §10). Defaults suit a long GPU run."""

    model_config = ConfigDict(extra="forbid")

    redis_url: str | None = Field(
        None, description="External Redis (redis:// or rediss://, password in the URL). None: a private "
                          "embedded redis-server in the run directory. The REDIS_URL environment variable wins.")
    appendfsync: Literal["always", "everysec", "no"] = Field(
        "everysec", description="AOF fsync policy of the embedded server: writes older than this window "
                                "survive a crash of the machine ('everysec': about 1 s).")
    max_unconsumed_groups: int = Field(
        1024, ge=1, description="Backpressure bound: producers wait while this many groups are written "
                                "but not yet ACKed by the learner.")
    retention_groups: int = Field(
        10_000, ge=0, description="Consumed group entries kept in the groups stream (audit, monitor); "
                                  "older consumed entries are trimmed. Unconsumed ones are never trimmed.")
    retention_prompts: int = Field(
        10_000, ge=0, description="Answered prompt entries kept in the prompts stream; older ones are trimmed.")
    reclaim_idle_ms: int = Field(
        60_000, ge=1, description="A delivered, un-ACKed entry idle this long belongs to a dead consumer and "
                                  "is reclaimed by another (XAUTOCLAIM). Must exceed the longest generation "
                                  "unless the producer touches its prompts (RunBuffer.touch_prompts).")
    max_deliveries: int = Field(
        5, ge=1, description="An entry reclaimed more often than this is poison (it kills its consumers): "
                             "dead-lettered instead of delivered again.")
    max_message_bytes: int = Field(
        256 << 20, ge=1024, le=512 << 20,
        description="Largest payload accepted (bytes); larger ones are dead-lettered. Redis' own bulk "
                    "limit is 512 MiB. A prompt and its group carry the problem's answer, so a code test spec "
                    "is held at load to half of this (rewards.code_max_spec_bytes when smaller).")
    backpressure_timeout_s: float = Field(
        600.0, gt=0, description="How long put_group waits for room before raising BackpressureTimeout.")
    deadletter_raw_bytes: int = Field(
        64 << 10, ge=0, description="Bytes of a rejected payload copied into its dead-letter entry "
                                    "(the length is always recorded).")
    deadletter_maxlen: int = Field(
        10_000, ge=100, description="Dead-letter entries kept (approximate cap; with deadletter_raw_bytes "
                                    "it bounds the stream's memory: 10K x 64 KiB = 640 MiB at most).")
    metrics_maxlen: int = Field(
        1_000_000, ge=100, description="Metrics rows kept (approximate cap; one row per learner step).")
    trim_every: int = Field(
        64, ge=1, description="Trim the prompts and groups streams after this many learner ACKs.")
