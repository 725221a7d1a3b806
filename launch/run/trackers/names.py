"""What a tracker calls things: a metrics row's numbers as flat names, a config as flat keys, MLflow's
name rule. Shared by ``launch.run.tracking`` and every backend."""

from __future__ import annotations

import json
import re
from typing import Any


def scalars(row: dict[str, Any], skip: tuple[str, ...] = ("step",)) -> dict[str, float]:
    """The row's numeric values under their keys; a dict of numbers flattened to ``key/subkey``.
    Booleans are numbers (0/1); strings, None and lists are not tracked."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            out.update({f"{key}/{k}": float(v) for k, v in value.items()
                        if isinstance(v, (int, float)) and not isinstance(v, str)})
        elif isinstance(value, (int, float)):
            out[key] = float(value)
    return out


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"learner": {"lr": 1e-6}}`` -> ``{"learner.lr": 1e-6}``; lists and None as JSON text."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_config(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


_MLFLOW_BAD = re.compile(r"[^A-Za-z0-9_\-. :/]")


def mlflow_name(name: str) -> str:
    """MLflow allows alphanumerics, ``_ - . : /`` and spaces in names: ``@`` becomes ``_at_``, any other
    character ``_`` (``eval/pass@4`` -> ``eval/pass_at_4``)."""
    return _MLFLOW_BAD.sub("_", name.replace("@", "_at_"))
