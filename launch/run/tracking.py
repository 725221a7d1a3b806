"""Experiment trackers: every metrics row and evaluation of a run, also in TensorBoard, W&B or MLflow.

    python launch/onpolicy.py --tiny                                   # TensorBoard into runs/<id>/tb/
    WANDB_MODE=offline python launch/onpolicy.py --tiny --tracking tensorboard,wandb,mlflow

One interface (:class:`Tracker`), one small module per backend in ``launch.run.trackers``; the
driver calls :class:`Trackers` exactly where it appends a row to ``metrics.jsonl`` / ``evals.jsonl``,
so a tracker holds the same rows under the same names:

- every numeric value of a row under its ``metrics.jsonl`` key, the row's ``step`` as the x-axis;
  a dict of numbers (``lag/hist``) as ``lag/hist/<key>``; strings (``mode``) and the guard's event
  are left to the files. MLflow forbids ``@`` in names: there ``eval/avg@n`` is ``eval/avg_at_n``
  (:func:`mlflow_name`, the one rule);
- the resolved config as hyperparameters (flattened to ``learner.lr``-style keys), redacted
  (``launch.config.redact``): a tracker's files and servers are outside the 0700 run directory;
- the run id as the tracker's run name (and W&B's run id), so a resumed run continues the same
  tracker run: TensorBoard discards the events of the steps being retrained (``purge_step``), W&B
  resumes the run id, MLflow reopens the run tagged with it.

TensorBoard is a core dependency (the default, no account); W&B and MLflow are the ``tracking`` extra,
imported only when asked for: a missing one fails at start with the ``pip install`` that fixes it.
A tracker that fails in the middle of a run is reported once and dropped; the run goes on.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from launch.config.redact import redact
from launch.config.refs import load
from launch.config.tracking import TRACKERS, TrackingConfig
from launch.run.trackers.names import flat_config, mlflow_name, scalars  # noqa: F401  (the names' one rule)

class TrackerUnavailable(RuntimeError):
    """A tracker was asked for but its package is not installed (the message names the install)."""


class Tracker(Protocol):
    """One backend. ``scalars`` are flat ``{name: float}`` (:func:`scalars`); ``step`` is the row's."""

    name: str
    where: str              # one line for the console: where its records go

    def log_scalars(self, scalars: dict[str, float], step: int) -> None: ...

    def log_image(self, tag: str, png: Path, step: int) -> None: ...

    def log_summary(self, scalars: dict[str, float]) -> None: ...

    def close(self, failed: bool = False) -> None: ...


@dataclass(frozen=True)
class TrackerContext:
    """What a tracker's ``open(context)`` gets: the run's name, its directory (TensorBoard writes ``log_dir/tb``,
    W&B ``log_dir/wandb``), where a default MLflow store goes (``store_root/mlruns``), the redacted
    hyperparameters, the first step this process logs, the tracking config and the console."""

    name: str
    log_dir: Path
    store_root: Path
    hparams: dict[str, Any]
    start_step: int
    cfg: TrackingConfig
    log: Any = print


def check_available(backends: list[str]) -> None:
    """Raise TrackerUnavailable for the first backend whose package is missing (cheap: no import)."""
    for b in backends:
        entry = TRACKERS[b]
        if importlib.util.find_spec(entry.package) is None:
            raise TrackerUnavailable(f"--tracking {b}: the '{entry.package}' package is not installed; {entry.install}")


class Trackers:
    """The run's trackers behind one call per row. Empty (no backends) is a valid, silent set."""

    def __init__(self, trackers: list[Tracker], log=print):
        self.trackers, self.log = list(trackers), log

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.trackers]

    def _each(self, what: str, fn) -> None:
        for t in list(self.trackers):
            try:
                fn(t)
            except Exception as exc:   # the run matters more than its tracker: report once, drop it
                self.log(redact(f"[tracking] {t.name} failed to {what} ({type(exc).__name__}: {exc}); "
                                f"it gets nothing more in this run (metrics.jsonl has every row)"))
                self.trackers.remove(t)
                try:
                    t.close(failed=True)
                except Exception:
                    pass

    def log_metrics(self, row: dict[str, Any]) -> None:
        """One learner step's row, as appended to ``metrics.jsonl``."""
        values, step = scalars(row), int(row["step"])
        self._each("log a metrics row", lambda t: t.log_scalars(values, step))

    def log_eval(self, row: dict[str, Any]) -> None:
        """One evaluation row, as appended to ``evals.jsonl`` (its ``eval/*`` values at its step; the
        version is the step row's)."""
        values, step = scalars(row, skip=("step", "version")), int(row["step"])
        self._each("log an evaluation", lambda t: t.log_scalars(values, step))

    def log_image(self, tag: str, png: str | Path, step: int = 0) -> None:
        self._each(f"log the figure {tag}", lambda t: t.log_image(tag, Path(png), step))

    def log_summary(self, figures: dict[str, float]) -> None:
        """The end-of-run figures (``launch.run.summary.summary_scalars``)."""
        self._each("log the summary", lambda t: t.log_summary(dict(figures)))

    def close(self, failed: bool = False) -> None:
        self._each("close", lambda t: t.close(failed))
        self.trackers = []


def open_trackers(cfg: TrackingConfig, *, name: str, log_dir: str | Path, store_root: str | Path,
                  hparams: dict[str, Any], start_step: int = 0, log=print) -> Trackers:
    """Open every backend in ``cfg`` for the run ``name``.

    ``log_dir``: the run's directory (TensorBoard writes ``log_dir/tb``, W&B ``log_dir/wandb``);
    ``store_root``: where a default MLflow file store goes (``store_root/mlruns``); ``start_step``: the
    first step this process logs (after a resume, the events of later steps from before are replaced).
    ``hparams`` are redacted here, once for every backend."""
    check_available(cfg.backends)
    context = TrackerContext(name, Path(log_dir), Path(store_root), redact(hparams), start_step, cfg, log)
    opened: list[Tracker] = []
    try:
        for backend in cfg.backends:
            opened.append(load(TRACKERS[backend].tracker).open(context))
    except BaseException:
        for t in opened:
            t.close(failed=True)
        raise
    if opened:
        log(redact(f"[tracking] {'; '.join(t.where for t in opened)}"))   # an MLflow URI may hold a token
    return Trackers(opened, log)
