"""Dotted command-line overrides for any pydantic config: `--learner.lr 1e-6`, `--actors.top_p=0.95`.

The override is applied to the config's JSON form and the whole object is re-validated, so a
value is parsed, range-checked and cross-checked (e.g. on-policy constraints) exactly as if it
had been written in a preset. Unknown keys and bad values fail with the full dotted path.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config override or value that cannot be used; the message says which and why."""


def split_overrides(argv: list[str]) -> list[tuple[str, str]]:
    """["--a.b", "1", "--c=x"] -> [("a.b", "1"), ("c", "x")]."""
    pairs, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            raise ConfigError(f"expected --key value, got {arg!r}")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(argv):
                raise ConfigError(f"--{key} needs a value")
            value, i = argv[i + 1], i + 1
        pairs.append((key.replace("-", "_"), value))
        i += 1
    return pairs


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, true/false, null, lists, maps), else the raw string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _all_paths(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    paths = []
    for k, v in node.items():
        paths += _all_paths(v, f"{prefix}.{k}" if prefix else k)
    return paths


def apply_overrides(config: M, pairs: list[tuple[str, str]]) -> M:
    data = config.model_dump(mode="json")
    valid = _all_paths(data)
    # A tag switch first (`--learner.entropy.type fixed`): it starts the member afresh from its own
    # defaults, and the member's fields given with it then apply whichever order they came in.
    pairs = sorted(pairs, key=lambda kv: not kv[0].endswith(".type"))
    # Keys the dump lacks go to the model too: an old input key a model still reads (``--learner.max_lag``,
    # folded into ``learner.lag`` by its validator) passes; a typo is refused there (extra fields are
    # forbidden) and reported as unknown, with the nearest known keys.
    absent = []
    for key, raw in pairs:
        node, parts = data, key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise ConfigError(_unknown(key, valid))
            node = node[part]
        if parts[-1] not in node and not _is_union_switch(node, parts[-1]):
            absent.append(key)
        value = parse_value(raw)
        if parts[-1] == "type" and node.get("type") != value:
            node.clear()        # the old member's fields are not the new one's (adaptive's target in fixed)
        node[parts[-1]] = value
    try:
        return type(config).model_validate(data)
    except ValidationError as exc:
        extra = {".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden"}
        for key in absent:
            if key in extra:
                raise ConfigError(_unknown(key, valid)) from None
        lines = [f"  --{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
                 for e in exc.errors()]
        raise ConfigError("invalid config:\n" + "\n".join(lines)) from None


def _unknown(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=3)
    hint = f"; did you mean {', '.join('--' + c for c in close)}?" if close else ""
    return f"unknown config key --{key}{hint}"


def _is_union_switch(node: dict, key: str) -> bool:
    """A tagged-union member (e.g. entropy `type`) may gain fields the current member lacks."""
    return "type" in node


def to_json(config: BaseModel) -> str:
    return config.model_dump_json(indent=2)


def from_json(cls: type[M], text: str) -> M:
    return cls.model_validate_json(text)
