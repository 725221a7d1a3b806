"""Secrets out of everything that leaves the run directory (DESIGN.md §10b): one function, :func:`redact`.

    redact(cfg)                                   # a config (pydantic) -> its JSON-able dict, redacted
    redact({"buffer": {"redis_url": "redis://:pw@h:6379/0"}})  -> {"buffer": {"redis_url": "redis://:***@h:6379/0"}}
    redact("[driver] redis rediss://user:pw@h/0")                -> "[driver] redis rediss://user:***@h/0"
    redact(["--hf_token", "abc", "--x=1"])                       -> ["--hf_token", "***", "--x=1"]

What counts as a secret:
- the userinfo of a URL of any scheme: ``user:password@`` keeps the user and hides the password; a lone
  ``token@`` (no colon) is hidden whole, as it may be a token (``https://<token>@github.com``);
- the value of a ``name=value`` (a query string ``?password=..``, a ``--flag=value``), of a dict field,
  or of the argument after a ``--flag`` whose name looks like a secret (:func:`is_secret_name`:
  password, token, secret, api_key, credentials, ...; ``max_tokens`` or ``tokenizer_path`` are not).

Only ``config.json``, ``redis_url.txt``, ``redis.json`` and ``redis/redis.conf`` (all 0600) keep the
secrets: the trackers, the run's meta in Redis, logs and the console get :func:`redact`'s copy.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"

# name parts (split on anything not alphanumeric, camelCase split too) that make a field a secret
_SECRET_PARTS = frozenset({"password", "passwd", "passphrase", "secret", "token", "credential", "credentials",
                           "apikey", "authorization", "cookie"})
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("auth", "key")})
_SECRET_WHOLE = frozenset({"auth", "pass"})     # too generic as a part ("auth_mode"), a secret alone

# scheme://userinfo@ : userinfo runs to the last '@' before the authority ends (as urllib and redis-py split it)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#\"']*)@")
# name=value in a query string or on a command line; the value ends where a query parameter would
_ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][\w.\-]*)=(?P<value>[^\s&#;\"']*)")


def _parts(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)          # apiKey -> api_Key
    return [p for p in re.split(r"[^a-z0-9]+", spaced.lower()) if p]


def is_secret_name(name: str) -> bool:
    """``password``, ``hf_token``, ``client_secret``, ``apiKey``, ``aws_access_key_id``, ``--buffer.password``
    -> True; ``max_tokens``, ``tokenizer_path``, ``prompt_key`` -> False."""
    parts = _parts(name)
    if len(parts) == 1 and parts[0] in _SECRET_WHOLE:
        return True
    return any(p in _SECRET_PARTS for p in parts) or any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:]))


def _hide_userinfo(match: re.Match) -> str:
    userinfo = match["userinfo"]
    if not userinfo:
        return match[0]
    user, colon, _ = userinfo.partition(":")
    return f"{match['scheme']}{user + ':' if colon else ''}{REDACTED}@"


def _hide_assignment(match: re.Match) -> str:
    if match["value"] and is_secret_name(match["name"]):
        return f"{match['name']}={REDACTED}"
    return match[0]


def _redact_text(text: str) -> str:
    return _ASSIGNMENT.sub(_hide_assignment, _USERINFO.sub(_hide_userinfo, text))


def _redact_list(items: list | tuple) -> list:
    out, hide_next = [], False
    for item in items:
        if hide_next and isinstance(item, str) and not item.startswith("--"):
            out.append(REDACTED)            # the value of a preceding "--password" (argv)
        else:
            out.append(redact(item))
        hide_next = isinstance(item, str) and item.startswith("-") and "=" not in item \
            and is_secret_name(item.lstrip("-"))
    return out


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret replaced by ``***`` (see the module docstring).

    A pydantic model becomes its JSON-able dict (``model_dump(mode="json")``); dicts, lists and tuples
    are walked (a tuple comes back a list); strings are scanned for URLs and ``name=value``; a dict
    field or list item whose name looks secret is hidden whole unless empty (``None``/``""`` stay,
    so one can see that no secret was set); anything else is returned as is."""
    if hasattr(value, "model_dump") and not isinstance(value, type):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and _is_set(v) else redact(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _redact_list(value)
    if isinstance(value, str):
        return _redact_text(value)
    return value


def _is_set(v: Any) -> bool:
    return v is not None and v != "" and v != {} and v != []


__all__ = ["REDACTED", "is_secret_name", "redact"]
