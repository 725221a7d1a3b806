"""Weights & Biases: the run id is the W&B run id and name, so a resumed run continues it.

``WANDB_MODE=offline`` needs no account or network: the run's files go to ``<run>/wandb/offline-run-*``
and ``wandb sync <run>/wandb/offline-run-*`` uploads them later (every incarnation of a resumed run
syncs into the one W&B run). Steps are the rows' ``step`` (``define_metric``), not W&B's own counter, so
the steps a resumed run retrains may go back in time and evaluations share their step's x value.
Console capture is off: the run directory has the logs. W&B records the command line (``sys.argv``) in
the run's metadata, which may hold ``--buffer.redis_url redis://:<password>@...``: it sees a redacted
copy (``launch.config.redact``), as it sees the redacted config.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from launch.config.redact import redact


class WandbTracker:
    name = "wandb"

    @classmethod
    def open(cls, context) -> WandbTracker:
        """The run's tracker (``context``: launch.run.tracking.TrackerContext): the run id as W&B's run id."""
        return cls(context.name, context.log_dir, context.hparams, project=context.cfg.project,
                   entity=context.cfg.wandb_entity)

    def __init__(self, run_name: str, log_dir: Path, hparams: dict[str, Any], *, project: str,
                 entity: str | None = None):
        import wandb

        log_dir.mkdir(parents=True, exist_ok=True)
        self.wandb = wandb
        with _redacted_argv():
            self.run = wandb.init(project=project, entity=entity, name=run_name, id=run_name, resume="allow",
                                  dir=str(log_dir), config=hparams, reinit="create_new",
                                  settings=wandb.Settings(console="off", silent=True))
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        mode = "offline" if self.run.settings.mode == "offline" else "online"
        self.where = f"wandb ({mode}): {self.run.dir.rsplit('/files', 1)[0]}"

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self.run.log({**scalars, "step": step})

    def log_image(self, tag: str, png: Path, step: int) -> None:
        self.run.log({tag: self.wandb.Image(str(png)), "step": step})

    def log_summary(self, scalars: dict[str, float]) -> None:
        self.run.summary.update({f"summary/{k}": v for k, v in scalars.items()})

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


@contextmanager
def _redacted_argv():
    """``sys.argv`` redacted while W&B reads it (its settings take the args at ``init``), then restored."""
    saved = sys.argv
    sys.argv = [saved[0], *redact(saved[1:])] if saved else saved
    try:
        yield
    finally:
        sys.argv = saved
