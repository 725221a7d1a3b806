"""MLflow: one run per lagrl run in the experiment ``project``, found again by its tag on resume.

The default store is a local file store, ``<run_dir>/mlruns`` (``mlflow ui --backend-store-uri
runs/mlruns``); MLflow 3 keeps that backend in maintenance mode and refuses it unless
``MLFLOW_ALLOW_FILE_STORE=true``, which is set for this process when the URI is a file store. Metric
names follow MLflow's rule (:func:`launch.run.tracking.mlflow_name`: ``@`` -> ``_at_``). Params are
immutable in MLflow: a resumed run logs the params it lacks and reports any that changed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from launch.run.trackers.names import flat_config, mlflow_name

RUN_TAG = "lagrl.run_id"
MAX_PARAM_CHARS = 6000      # MLflow's limit on a param value
BATCH = 100                 # params per log_batch call (MLflow's limit)


def resolve_uri(uri: str | None, store_root: Path) -> str:
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"file:{(store_root / 'mlruns').resolve()}"
    if uri.startswith("file:") or "://" not in uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class MlflowTracker:
    name = "mlflow"

    @classmethod
    def open(cls, context) -> MlflowTracker:
        """The run's tracker (``context``: launch.run.tracking.TrackerContext): one MLflow run tagged with its id."""
        return cls(context.name, context.hparams, uri=context.cfg.mlflow_uri, store_root=context.store_root,
                   experiment=context.cfg.project, log=context.log)

    def __init__(self, run_name: str, hparams: dict[str, Any], *, uri: str | None, store_root: Path,
                 experiment: str, log=print):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.uri = resolve_uri(uri, store_root)
        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        found = self.client.search_runs([exp_id], filter_string=f"tags.`{RUN_TAG}` = '{run_name}'", max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            logged = found[0].data.params
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run_name, tags={RUN_TAG: run_name}).info.run_id
            logged = {}
        params = {mlflow_name(k): str(v)[:MAX_PARAM_CHARS] for k, v in flat_config(hparams).items()}
        changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
        if changed:
            log(f"[tracking] mlflow: params are immutable; kept the first values of {', '.join(changed)}")
        new = [Param(k, v) for k, v in params.items() if k not in logged]
        for i in range(0, len(new), BATCH):
            self.client.log_batch(self.run_id, params=new[i:i + BATCH])
        self.where = f"mlflow: {self.uri} (experiment {experiment}, run {run_name})"

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_name(k), v, now, step) for k, v in scalars.items()]
        for i in range(0, len(metrics), 1000):        # MLflow's limit per batch
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def log_image(self, tag: str, png: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(png), artifact_path=f"figures/{mlflow_name(tag)}")

    def log_summary(self, scalars: dict[str, float]) -> None:
        self.client.set_tag(self.run_id, "lagrl.summary", " ".join(f"{k}={v:g}" for k, v in scalars.items())[:5000])

    def close(self, failed: bool = False) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
