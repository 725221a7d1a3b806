"""TrackingConfig and the registry of experiment trackers (``--tracking tensorboard,wandb,mlflow``).

Adding a tracker: a module in ``launch/run/trackers/`` whose class has ``open(context)`` (see
``launch.run.tracking.TrackerContext``) and one entry in :data:`TRACKERS`. The config's choices, the
install check and the driver's opening all come from the entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


@dataclass(frozen=True)
class TrackerEntry:
    tracker: str        # "module:Class" of the tracker (launch/run/trackers), opened with Class.open(context)
    package: str        # the module it needs (checked before the run starts, without importing it)
    install: str        # what provides that module


TRACKERS: dict[str, TrackerEntry] = {
    "tensorboard": TrackerEntry("launch.run.trackers.tensorboard_tracker:TensorBoardTracker", "tensorboard",
                                "pip install tensorboard"),
    "wandb": TrackerEntry("launch.run.trackers.wandb_tracker:WandbTracker", "wandb",
                          "pip install -e '.[tracking]'  (or: pip install wandb)"),
    "mlflow": TrackerEntry("launch.run.trackers.mlflow_tracker:MlflowTracker", "mlflow",
                           "pip install -e '.[tracking]'  (or: pip install mlflow-skinny)"),
}

Backend = Literal[tuple(TRACKERS)]      # exactly the registered names


class TrackingConfig(BaseModel):
    """``--tracking tensorboard,wandb,mlflow`` (any subset, ``none`` for none) sets ``backends``."""

    model_config = ConfigDict(extra="forbid")

    backends: list[Backend] = Field(default_factory=lambda: ["tensorboard"],
                                    description="Trackers that receive every metrics row and evaluation.")
    project: str = Field("lagrl", min_length=1, description="W&B project and MLflow experiment name.")
    wandb_entity: str | None = Field(None, description="W&B entity (team or user); None = W&B's default.")
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; None = $MLFLOW_TRACKING_URI, else "
                                   "a local file store in <run_dir>/mlruns (shared by the runs of run_dir).")

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        """``"tensorboard,wandb"``, ``["wandb"]`` or ``"none"`` stand for ``{"backends": [...]}``."""
        if isinstance(value, str):
            value = [] if value.strip().lower() in ("", "none") else [v.strip() for v in value.split(",")]
        if isinstance(value, list):
            return {"backends": value}
        return value

    @model_validator(mode="after")
    def _no_repeats(self) -> TrackingConfig:
        if len(set(self.backends)) != len(self.backends):
            raise ValueError(f"tracking backends repeat: {self.backends}")
        return self
