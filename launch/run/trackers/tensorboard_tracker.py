"""TensorBoard: event files in ``<run>/tb/`` (``tensorboard --logdir runs`` shows every run side by side).

Written with torch's ``SummaryWriter`` (it needs the ``tensorboard`` package). A resumed run writes a
new event file into the same directory with ``purge_step`` = the first step it logs, so TensorBoard
discards the previous incarnation's events from that step on (the steps being retrained) and the
run reads as one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launch.run.trackers.names import flat_config


class TensorBoardTracker:
    name = "tensorboard"

    @classmethod
    def open(cls, context) -> TensorBoardTracker:
        """The run's tracker (``context``: launch.run.tracking.TrackerContext): event files in ``<run>/tb``."""
        return cls(context.log_dir / "tb", context.hparams, context.start_step)

    def __init__(self, log_dir: Path, hparams: dict[str, Any], start_step: int = 0):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        resumed = log_dir.is_dir() and any(log_dir.glob("events.out.tfevents.*"))
        self.where = f"tensorboard: {log_dir}"
        self.writer = SummaryWriter(str(log_dir), purge_step=start_step if resumed else None)
        flat = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in flat_config(hparams).items()}
        # the hparams plugin's records go into this run's own file (add_hparams would open a sub-run)
        for summary in hparams_summary(flat, {}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("config", "```\n" + json.dumps(hparams, indent=1, default=str) + "\n```", start_step)
        self.writer.flush()

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def log_image(self, tag: str, png: Path, step: int) -> None:
        import numpy as np
        from PIL import Image

        image = np.asarray(Image.open(png).convert("RGB"))            # (H, W, 3) uint8
        self.writer.add_image(tag, image, step, dataformats="HWC")
        self.writer.flush()

    def log_summary(self, scalars: dict[str, float]) -> None:
        self.writer.add_text("summary", "\n".join(f"    {k}: {v:g}" for k, v in scalars.items()))
        self.writer.flush()

    def close(self, failed: bool = False) -> None:
        self.writer.close()
