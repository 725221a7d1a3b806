"""The run configuration: one typed config per component, composed, with CLI overrides.

    RunConfig
    ├── buffer:  buffer.config.BufferConfig        (Redis, backpressure, retention)
    ├── actors:  actors.config.ActorConfig         (vLLM engines, sampling)
    ├── rewards: rewards.config.RewardConfig       (verifiers, sandbox, worker pool)
    ├── learner: learner.trainer_config.LearnerConfig (mode, batches, loss, entropy, DeepSpeed)
    └── data:    DataConfig                        (model, datasets, stages, evaluation)

Presets (launch/presets.py) build these objects in Python; `--section.field value` overrides
any field; the resolved config is printed and saved as JSON in the run directory at start.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.config import ActorConfig
from buffer.config import BufferConfig
from learner.trainer_config import LearnerConfig
from rewards.config import RewardConfig


class StageConfig(BaseModel):
    """One stage of a multi-stage context schedule (Skywork-OR1: 8K -> 16K -> 32K)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(..., ge=1, description="Response budget T during this stage.")
    steps: int | None = Field(None, ge=1, description="Learner steps in this stage; None = until the run ends.")


class DataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: str | None = Field(None, description="Hugging Face model directory (None with --tiny: the tiny world's model).")
    train_path: str | None = Field(None, description="JSONL/parquet of math problems (fields: problem, answer[, id, data_source]).")
    eval_path: str | None = Field(None, description="Held-out JSONL/parquet for avg@n evaluation.")
    prompt_key: str = Field("problem", description="Field holding the problem text.")
    answer_key: str = Field("answer", description="Field holding the gold answer.")
    chat_template: bool = Field(True, description="Wrap problems in the tokenizer's chat template when it has one.")
    stages: list[StageConfig] = Field(default_factory=lambda: [StageConfig(max_tokens=16384)],
                                      min_length=1, description="Context-length schedule; the last stage runs to the end.")
    online_filter: bool = Field(True, description="At each stage start, drop prompts whose accuracy reached 1 in the previous stage.")
    eval_every: int = Field(0, ge=0, description="Learner steps between avg@n evaluations (0 = only before and after).")
    eval_n: int = Field(4, ge=1, description="Samples per held-out problem for avg@n (AIME: 32).")
    eval_max_problems: int = Field(256, ge=1, description="Cap on held-out problems per evaluation.")
    shuffle_seed: int = Field(0, ge=0, description="Seed of the training-prompt order.")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: str = Field("baseline", description="Name of the preset this config started from.")
    run_id: str = Field(default_factory=lambda: time.strftime("run-%Y%m%d-%H%M%S"),
                        pattern=r"^[A-Za-z0-9._-]{1,64}$", description="Namespace of every Redis key of this run.")
    run_dir: str = Field("runs", description="Parent directory; the run writes to run_dir/run_id.")
    steps: int = Field(100, ge=1, description="Learner steps to run.")
    seed: int = Field(0, ge=0, description="Global seed.")
    tiny: bool = Field(False, description="Use the tiny CPU world (built and cached on first use).")
    max_wall_s: float | None = Field(None, gt=0, description="Stop cleanly after this many seconds.")
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    actors: ActorConfig = Field(default_factory=ActorConfig)
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    data: DataConfig = Field(default_factory=DataConfig)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if self.actors.group_size != self.learner.group_size:
            raise ValueError(f"actors.group_size={self.actors.group_size} != learner.group_size="
                             f"{self.learner.group_size}: both must be the group size gs")
        if self.actors.temperature != self.learner.temperature:
            raise ValueError("actors.temperature and learner.temperature must match: the learner "
                             "divides logits by the sampling temperature")
        return self

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / self.run_id
