"""Read what a tracker wrote, with each tracker's own reader: TensorBoard's event accumulator, the MLflow
store through MlflowClient, and W&B's offline run files (``run-<id>.wandb``: W&B's record log, a
LevelDB-style log of ``wandb_internal_pb2.Record`` protobufs; W&B ships no Python reader for it)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value}, as TensorBoard shows them (purged steps of a resumed run dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def tensorboard_images(log_dir: Path) -> dict[str, list[tuple[int, int, int]]]:
    """image tag -> [(step, width, height)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"images": 0})
    acc.Reload()
    return {tag: [(e.step, e.width, e.height) for e in acc.Images(tag)] for tag in acc.Tags()["images"]}


def tensorboard_hparams(log_dir: Path) -> dict[str, object]:
    """The hparams plugin's session-start values."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    acc.Reload()
    out: dict[str, object] = {}
    for tag, content in acc.PluginTagToContent("hparams").items():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") == "session_start_info":
            for k, v in data.session_start_info.hparams.items():
                out[k] = getattr(v, v.WhichOneof("kind"))
    return out


def mlflow_run(uri: str, experiment: str, run_name: str):
    """(client, runs) for every MLflow run tagged with the lagrl run id."""
    import os

    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`lagrl.run_id` = '{run_name}'")
    return client, runs


def mlflow_scalars(client, run_id: str) -> dict[str, dict[int, float]]:
    """metric -> {step: last value logged at that step}."""
    keys = client.get_run(run_id).data.metrics.keys()
    out = {}
    for key in keys:
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp)
        out[key] = {m.step: m.value for m in history}
    return out


def _wandb_records(path: Path):
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file (header {data[:7]!r})")
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:                       # a block's zero-filled tail
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:                      # FULL
            yield chunk
        elif kind == 2:                    # FIRST
            pending = chunk
        elif kind == 3:                    # MIDDLE
            pending += chunk
        elif kind == 4:                    # LAST
            yield pending + chunk


def wandb_offline_runs(wandb_dir: Path) -> list[dict]:
    """Every offline run directory under ``wandb_dir``, oldest first: run id, name, project, config and
    the history rows (user keys only)."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for f in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")):
        run = {"file": f, "history": [], "config": {}, "summary": {}}
        for raw in _wandb_records(f):
            rec = pb.Record()
            rec.ParseFromString(raw)
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                run.update(id=rec.run.run_id, name=rec.run.display_name, project=rec.run.project)
                run["config"].update({u.key: json.loads(u.value_json) for u in rec.run.config.update})
            elif kind == "config":
                run["config"].update({u.key: json.loads(u.value_json) for u in rec.config.update})
            elif kind == "summary":
                run["summary"].update({u.key or "/".join(u.nested_key): json.loads(u.value_json)
                                       for u in rec.summary.update})
            elif kind == "history":
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                run["history"].append({k: v for k, v in row.items() if not k.startswith("_")})
        runs.append(run)
    return runs


def same(a: float, b: float, rel: float = 1e-6) -> bool:
    """Equal as logged: NaN equals NaN; TensorBoard stores float32, hence the relative tolerance."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-30)
