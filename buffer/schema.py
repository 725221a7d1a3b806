"""Messages that cross the buffer: prompts, trajectory groups, metrics.

Every payload is one msgpack map with a ``schema`` integer so old runs stay readable.
Token ids travel as little-endian int32 bytes and log-probs as little-endian float32
bytes (DESIGN.md §2): a 16K-token response is 64 KiB of bytes, not 16K msgpack ints.

Decoding never trusts the payload: :func:`decode_prompt` / :func:`decode_group` raise
:class:`InvalidMessage` with a short reason, which the stream readers turn into a
dead-letter entry (never a crash, never a silent drop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

SCHEMA_VERSION = 1
SUPPORTED_SCHEMAS = frozenset({1})

_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")


class InvalidMessage(ValueError):
    """A payload that cannot be used; ``reason`` is a short machine-readable tag."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def pack_tokens(ids: Any) -> bytes:
    return np.ascontiguousarray(np.asarray(ids, dtype=_I32)).tobytes()


def pack_logprobs(values: Any) -> bytes:
    return np.ascontiguousarray(np.asarray(values, dtype=_F32)).tobytes()


def unpack_tokens(raw: bytes) -> np.ndarray:
    if not isinstance(raw, (bytes, bytearray)) or len(raw) % 4:
        raise InvalidMessage("bad_tokens", "token ids must be int32 bytes")
    return np.frombuffer(raw, dtype=_I32)


def unpack_logprobs(raw: bytes) -> np.ndarray:
    if not isinstance(raw, (bytes, bytearray)) or len(raw) % 4:
        raise InvalidMessage("bad_logprobs", "log-probs must be float32 bytes")
    return np.frombuffer(raw, dtype=_F32)


@dataclass
class PromptMsg:
    """One prompt to sample ``n_samples`` responses for (the ``prompts`` stream)."""

    prompt_id: str            # unique per issuance: the group produced from it has group_id == prompt_id
    data_source: str          # e.g. "tiny_arith", "aime24"
    prompt_ids: np.ndarray    # (P,) int32 prompt token ids
    answer: str               # gold answer (math) or JSON-encoded tests (code)
    n_samples: int            # group size gs
    max_tokens: int           # response budget for this prompt's stage
    step: int                 # learner step this prompt is issued for
    min_version: int          # admission: start only with policy weights of at least this version
    stage: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Response:
    """One sampled response with what the learner needs to correct for off-policyness."""

    token_ids: np.ndarray     # (L,) int32
    logprobs: np.ndarray      # (L,) float32 behaviour log-prob of each sampled token
    finish_reason: str        # "stop" | "length" | "abort"
    version_start: int        # policy version when sampling began
    version_end: int          # policy version when it finished (> start: weights swapped mid-response)
    reward: float = 0.0
    reward_info: dict[str, Any] = field(default_factory=dict)  # reason, extracted answer, ...

    @property
    def length(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class Group:
    """All responses to one prompt (the ``groups`` stream); the learner's unit of data."""

    group_id: str
    prompt_id: str
    data_source: str
    step: int
    prompt_ids: np.ndarray    # (P,) int32
    answer: str
    responses: list[Response]
    actor_id: str
    stage: int = 0
    created_at: float = 0.0   # when the prompt was taken
    finished_at: float = 0.0  # when the last response finished

    @property
    def rewards(self) -> np.ndarray:
        return np.array([r.reward for r in self.responses], dtype=np.float64)


def encode_prompt(p: PromptMsg) -> bytes:
    return msgpack.packb({
        "schema": SCHEMA_VERSION, "kind": "prompt", "prompt_id": p.prompt_id,
        "data_source": p.data_source, "prompt_ids": pack_tokens(p.prompt_ids), "answer": p.answer,
        "n_samples": p.n_samples, "max_tokens": p.max_tokens, "step": p.step,
        "min_version": p.min_version, "stage": p.stage, "meta": p.meta,
    }, use_bin_type=True)


def encode_group(g: Group) -> bytes:
    return msgpack.packb({
        "schema": SCHEMA_VERSION, "kind": "group", "group_id": g.group_id, "prompt_id": g.prompt_id,
        "data_source": g.data_source, "step": g.step, "stage": g.stage,
        "prompt_ids": pack_tokens(g.prompt_ids), "answer": g.answer, "actor_id": g.actor_id,
        "created_at": g.created_at, "finished_at": g.finished_at,
        "responses": [{
            "token_ids": pack_tokens(r.token_ids), "logprobs": pack_logprobs(r.logprobs),
            "finish_reason": r.finish_reason, "version_start": r.version_start,
            "version_end": r.version_end, "reward": float(r.reward), "reward_info": r.reward_info,
        } for r in g.responses],
    }, use_bin_type=True)


def _unpack_map(raw: bytes, kind: str, max_bytes: int) -> dict[str, Any]:
    if not isinstance(raw, (bytes, bytearray)):
        raise InvalidMessage("not_bytes", type(raw).__name__)
    if len(raw) > max_bytes:
        raise InvalidMessage("oversize", f"{len(raw)} bytes > limit {max_bytes}")
    try:
        msg = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise InvalidMessage("malformed_msgpack", repr(exc)[:200]) from None
    if not isinstance(msg, dict):
        raise InvalidMessage("not_a_map", type(msg).__name__)
    if msg.get("schema") not in SUPPORTED_SCHEMAS:
        raise InvalidMessage("unknown_schema", repr(msg.get("schema")))
    if msg.get("kind") != kind:
        raise InvalidMessage("wrong_kind", f"expected {kind!r}, got {msg.get('kind')!r}")
    return msg


def _field(msg: dict, name: str, types: type | tuple[type, ...]) -> Any:
    value = msg.get(name)
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        raise InvalidMessage("bad_field", f"{name}={value!r:.80} is not {types}")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def decode_prompt(raw: bytes, max_bytes: int = 64 << 20) -> PromptMsg:
    msg = _unpack_map(raw, "prompt", max_bytes)
    prompt_ids = unpack_tokens(_field(msg, "prompt_ids", bytes))
    if prompt_ids.size == 0:
        raise InvalidMessage("empty_prompt")
    n_samples = _field(msg, "n_samples", int)
    max_tokens = _field(msg, "max_tokens", int)
    if n_samples < 1 or max_tokens < 1:
        raise InvalidMessage("bad_field", f"n_samples={n_samples} max_tokens={max_tokens}")
    return PromptMsg(
        prompt_id=_field(msg, "prompt_id", str), data_source=_field(msg, "data_source", str),
        prompt_ids=prompt_ids, answer=_field(msg, "answer", str), n_samples=n_samples,
        max_tokens=max_tokens, step=_field(msg, "step", int),
        min_version=_field(msg, "min_version", int), stage=_field(msg, "stage", int),
        meta=_field(msg, "meta", dict),
    )


def _decode_response(r: Any, index: int) -> Response:
    if not isinstance(r, dict):
        raise InvalidMessage("bad_response", f"response {index} is not a map")
    token_ids = unpack_tokens(_field(r, "token_ids", bytes))
    logprobs = unpack_logprobs(_field(r, "logprobs", bytes))
    if token_ids.shape != logprobs.shape:
        raise InvalidMessage("length_mismatch",
                             f"response {index}: {token_ids.size} tokens vs {logprobs.size} log-probs")
    if logprobs.size and not np.isfinite(logprobs).all():
        raise InvalidMessage("nonfinite_logprobs", f"response {index}")
    if logprobs.size and (logprobs > 1e-4).any():
        raise InvalidMessage("positive_logprobs", f"response {index}: log-probs must be <= 0")
    reward = _field(r, "reward", (float, int))
    if not math.isfinite(reward):
        raise InvalidMessage("nonfinite_reward", f"response {index}")
    v0, v1 = _field(r, "version_start", int), _field(r, "version_end", int)
    if v0 < 0 or v1 < v0:
        raise InvalidMessage("bad_versions", f"response {index}: start={v0} end={v1}")
    return Response(
        token_ids=token_ids, logprobs=logprobs, finish_reason=_field(r, "finish_reason", str),
        version_start=v0, version_end=v1, reward=float(reward),
        reward_info=_field(r, "reward_info", dict),
    )


def decode_group(raw: bytes, max_bytes: int = 256 << 20) -> Group:
    msg = _unpack_map(raw, "group", max_bytes)
    responses = _field(msg, "responses", list)
    if not responses:
        raise InvalidMessage("empty_group")
    return Group(
        group_id=_field(msg, "group_id", str), prompt_id=_field(msg, "prompt_id", str),
        data_source=_field(msg, "data_source", str), step=_field(msg, "step", int),
        stage=_field(msg, "stage", int), prompt_ids=unpack_tokens(_field(msg, "prompt_ids", bytes)),
        answer=_field(msg, "answer", str), actor_id=_field(msg, "actor_id", str),
        created_at=float(_field(msg, "created_at", (float, int))),
        finished_at=float(_field(msg, "finished_at", (float, int))),
        responses=[_decode_response(r, i) for i, r in enumerate(responses)],
    )


def encode_map(payload: dict[str, Any]) -> bytes:
    """Metrics / control payloads: a plain map stamped with the schema version."""
    return msgpack.packb({"schema": SCHEMA_VERSION, **payload}, use_bin_type=True)


def decode_map(raw: bytes) -> dict[str, Any]:
    msg = msgpack.unpackb(raw, raw=False)
    if not isinstance(msg, dict) or msg.get("schema") not in SUPPORTED_SCHEMAS:
        raise InvalidMessage("unknown_schema", repr(msg)[:80])
    return msg
