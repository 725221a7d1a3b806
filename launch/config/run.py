"""The run configuration: one typed config per component, composed, with CLI overrides.

    RunConfig                                      (run-wide: temperature, group size, steps, seed)
    ├── buffer:  buffer.config.BufferConfig        (Redis, backpressure, retention)
    ├── actors:  actors.config.ActorConfig         (vLLM engines, sampling)
    ├── rewards: rewards.config.RewardConfig       (verifiers, sandbox, worker pool)
    ├── learner: learner.trainer_config.LearnerConfig (mode, batches, loss, entropy, DeepSpeed)
    ├── data:    DataConfig                        (model, datasets, stages = response budgets, evaluation)
    └── tracking: launch.config.tracking.TrackingConfig (TensorBoard / W&B / MLflow; `--tracking a,b`)

Settings that several components must agree on live once, at the top: the sampling
temperature (actors sample at it, the learner divides its logits by it), the group size, the
seed and the per-stage response budget (``data.stages``). The driver hands them down (prompts carry
them to the actors; the learner gets them as arguments), so no component holds a copy.

Presets (launch/config/presets.py) build these objects in Python, a world (launch/worlds/) scales them to
a CPU machine; `--section.field value` overrides any field; the resolved config is printed and saved
as JSON in the run directory at start.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.config import ActorConfig
from buffer.config import BufferConfig
from launch.config.layout import config_problems
from launch.config.tracking import TrackingConfig
from launch.config.worlds import WorldName
from learner.trainer_config import LearnerConfig
from rewards.config import RewardConfig


class StageConfig(BaseModel):
    """One stage of a multi-stage context schedule (Skywork-OR1: 8K -> 16K -> 32K)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(..., ge=1, description="Response budget T during this stage.")
    steps: int | None = Field(None, ge=1, description="Learner steps in this stage; None = until the run ends.")


class DataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: str | None = Field(None, description="Hugging Face model directory (None in a world: the world's "
                                  "model).")
    model_source: Literal["auto", "shared", "object_store"] = Field(
        "auto", description="How actors and learner ranks get model_dir (actors.cluster.model_source): 'shared' = the "
        "path is on every node; 'object_store' = the driver sends it through Ray and each node caches it "
        "locally; 'auto' = object_store on a cluster of several nodes, shared on one.")
    train_path: str | None = Field(None, description="JSONL/parquet of problems: flat (problem, answer[, id, "
                                   "data_source]) or the verl layout (see format).")
    eval_path: str | None = Field(None, description="Held-out JSONL/parquet for avg@n evaluation.")
    format: Literal["auto", "flat", "verl"] = Field(
        "auto", description="Dataset rows: 'flat' = prompt_key/answer_key fields; 'verl' = the verl layout "
        "(data_source, prompt as chat messages, ability, reward_model.ground_truth, extra_info; "
        "rewards.verl_format); 'auto' = verl when the first row has a chat-message prompt and reward_model.")
    bad_rows: Literal["fail", "skip"] = Field(
        "fail", description="A row that cannot be scored (verl layout: no user message, code tests the "
        "sandbox cannot run, ...): 'fail' stops at load naming the rows; 'skip' trains on the others and "
        "prints the rejected rows with their reasons.")
    prompt_key: str = Field("problem", description="Field holding the problem text (flat rows).")
    answer_key: str = Field("answer", description="Field holding the gold answer.")
    chat_template: bool = Field(True, description="Wrap problems in the tokenizer's chat template when it has one.")
    stages: list[StageConfig] = Field(default_factory=lambda: [StageConfig(max_tokens=16384)],
                                      min_length=1, description="Context-length schedule; the last stage runs to the end.")
    online_filter: bool = Field(True, description="At each stage start, drop prompts whose accuracy reached 1 in the previous stage.")
    eval_every: int = Field(0, ge=0, description="Learner steps between avg@n evaluations (0 = only before and after).")
    eval_n: int = Field(4, ge=1, description="Samples per held-out problem for avg@n (AIME: 32).")
    eval_temperature: float | None = Field(
        None, gt=0.0, le=2.0, description="Sampling temperature of the held-out evaluation (avg@n, pass@k); None = "
        "the run's own. One value for runs that sample at different temperatures measures their accuracy the "
        "same way (the science report's temperature finding evaluates at 1.0, as the probe measures entropy).")
    final_eval_n: int = Field(0, ge=0, description="Samples per held-out problem at the run's final evaluation, "
                              "so pass@k up to k = final_eval_n there (e.g. 16); 0 = eval_n.")
    eval_max_problems: int = Field(256, ge=1, description="Cap on held-out problems per evaluation.")
    probe_problems: int = Field(32, ge=0, description="The entropy probe at every evaluation (launch.run.probe): "
                                "the policy's own entropy (temperature 1) on responses it samples at temperature 1 "
                                "for the first this-many held-out problems, the same in every run of the world "
                                "(0 = no probe).")
    probe_n: int = Field(4, ge=1, description="Responses sampled per probe problem.")
    over_issue_waste: float = Field(
        0.01, ge=0.0, le=0.2, description="Extra prompts per step for the groups dynamic sampling is expected "
        "to reject (rate of recent steps), so fewer replacements wait for a second generation round: as many as "
        "keep the expected stale surplus within this fraction of the step's groups (0 = replacements only).")

    def stage_at(self, step: int) -> tuple[int, int]:
        """(stage index, response budget) at learner ``step``; the last stage runs to the end."""
        start = 0
        for i, stage in enumerate(self.stages):
            if stage.steps is None or step < start + stage.steps:
                return i, stage.max_tokens
            start += stage.steps
        return len(self.stages) - 1, self.stages[-1].max_tokens

    def eval_max_tokens(self, steps_done: int) -> int:
        """The response budget of an evaluation after ``steps_done`` learner steps: the current stage's
        (the one the next step trains in), so held-out problems get the budget training has reached,
        not the first stage's."""
        return self.stage_at(steps_done)[1]

    @property
    def final_eval_samples(self) -> int:
        """Samples per held-out problem at the run's final evaluation: ``final_eval_n``, or ``eval_n`` when 0."""
        return self.final_eval_n or self.eval_n

    @property
    def max_response_tokens(self) -> int:
        """The largest budget of any stage (the context the engines must hold)."""
        return max(s.max_tokens for s in self.stages)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: str = Field("baseline", description="Name of the preset this config started from.")
    run_id: str = Field(default_factory=lambda: time.strftime("run-%Y%m%d-%H%M%S"),
                        pattern=r"^[A-Za-z0-9._-]{1,64}$", description="Namespace of every Redis key of this run.")
    run_dir: str = Field("runs", description="Parent directory; the run writes to run_dir/run_id.")
    steps: int = Field(100, ge=1, description="Learner steps to run.")
    seed: int = Field(0, ge=0, description="The run's one seed: the prompt order, each actor's sampling "
                      "(seed + actor index), the learner's mini-batch shuffles and torch on its ranks.")
    world: WorldName | None = Field(None, description="The CPU world this config was scaled to (launch.worlds: "
                                    "its model, data and prompt template, built and cached on first use); None = "
                                    "data.model_dir and data.train_path.")
    temperature: float = Field(1.0, gt=0.0, le=2.0, description="Sampling temperature τ (Skywork-OR1: 1.0, "
                               "ablation 0.6): the actors sample at it and the learner divides its logits by it.")
    group_size: int = Field(16, ge=2, description="gs: responses sampled per prompt (16 in the paper; >= 2 "
                            "for a group standard deviation).")
    max_wall_s: float | None = Field(None, gt=0, description="Stop cleanly after this many seconds.")
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    actors: ActorConfig = Field(default_factory=ActorConfig)
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        cache = self.learner.advantage.overlong_cache
        shortest = min(s.max_tokens for s in self.data.stages)
        if cache is not None and cache > shortest:
            raise ValueError(f"learner.advantage.overlong_cache={cache} exceeds the shortest stage budget "
                             f"{shortest}: L_cache must be <= L_max of every stage")
        # whether the weight transport serves a fixed lag's older versions: launch.config.layout.config_problems
        # (_gpu_layout below), from the transport's registry entry (auto picks one that does)
        return self

    @model_validator(mode="after")
    def _gpu_layout(self) -> RunConfig:
        problems = config_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / self.run_id
