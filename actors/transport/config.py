"""The weight transports' settings (the collective's; the object store has none): in the transport package,
which the actor config imports, so the transport never imports the actors package above it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CollectiveConfig(BaseModel):
    """The collective weight transport (``weight_transport: collective``; actors/transport/collective.py)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="Broadcast backend; auto = nccl when the learner's weights are on CUDA, else gloo.")
    bucket_mb: int | None = Field(None, ge=1, le=16384, description="Bucket size in MB: peak extra memory per version is about one bucket (or the largest tensor); None = 256 with nccl, 64 with gloo.")
    join_timeout_s: float = Field(60.0, gt=0, le=3600, description="How long the learner waits for members to be ready / done (and an actor for the learner's decision); keep it below buffer.reclaim_idle_ms.")
    collective_timeout_s: float = Field(300.0, gt=0, le=7200, description="Bound on building a group and on each broadcast; a dead member ends it with an error naming it.")
    heartbeat_s: float = Field(1.0, gt=0, le=60, description="Seconds between an actor's heartbeats into the learner's hub (written from its loop).")
    stale_after_s: float = Field(15.0, gt=0, le=3600, description="A member silent this long is treated as dead: the learner stops waiting for it and re-forms the group without it.")
    max_attempts: int = Field(3, ge=1, le=10, description="Attempts per version (each with the survivors of the last) before the learner raises.")
    catch_up_every_s: float = Field(2.0, gt=0, le=600, description="While waiting for data, how often the learner checks for live actors lacking the published version (restarted or added) and sends it to them.")
    start_timeout_s: float = Field(900.0, gt=0, le=7200, description="How long the learner waits at start for every actor to register (engine start-up included).")

    @model_validator(mode="after")
    def _consistent(self) -> CollectiveConfig:
        if self.stale_after_s < 2 * self.heartbeat_s:
            raise ValueError(f"stale_after_s={self.stale_after_s} must be >= 2 * heartbeat_s={self.heartbeat_s}: "
                             "a live actor would look dead between two heartbeats")
        return self
