"""``"module:attribute"`` references: how the registries (worlds, trackers) name their parts without importing
them. A registry lives in ``launch.config`` and stays import-free; the part is loaded where it is used."""

from __future__ import annotations

import importlib
from typing import Any


def load(ref: str) -> Any:
    """The attribute a ``"module:attribute"`` reference names (the module is imported now)."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)
