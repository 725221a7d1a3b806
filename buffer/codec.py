"""The buffer's wire format: how prompts, trajectory groups and metrics become Redis payloads.

Every payload carries a ``schema`` integer so old runs stay readable. Prompts and metrics are
one msgpack map (schema 1). Token ids travel as little-endian int32 bytes and log-probs as
little-endian float32 bytes (DESIGN.md §2): a 16K-token response is 64 KiB, not 16K msgpack ints.

A trajectory group (schema 2) is framed so the reader never copies its arrays::

    b"\xc1LG\x02" | u32 LE header length H | msgpack header map (H bytes) | zero pad to 8
    | int32 token ids of all responses, back to back | float32 log-probs, same order

The header holds the scalars and one ``lengths`` entry per response. 0xC1 is never valid msgpack,
so a frame cannot be mistaken for a schema-1 group (one msgpack map with a bin per array), which
is still decoded. Why frame: msgpack copies every bin on unpacking (0.5 MB per 4K-token group,
plus a second copy to validate it in one pass); the frame's arrays are numpy views of the bytes
redis-py returned, checked with two reductions (bench/buffer_throughput.py: -50 us per group).
The writer does not copy them either: :func:`group_frame_parts` hands the responses' own arrays
to a scatter-gather write (buffer/wire.py).

Decoding never trusts the payload: :func:`decode_prompt` / :func:`decode_group` raise
:class:`InvalidMessage` with a short reason, which the stream readers turn into a
dead-letter entry (never a crash, never a silent drop).
"""

from __future__ import annotations

import math
import struct
import threading
from typing import Any

import msgpack
import numpy as np

from buffer.messages import Group, InvalidMessage, PromptMsg, Response

SCHEMA_VERSION = 1                  # written by prompts and metrics (and by groups before framing)
GROUP_SCHEMA = 2                    # groups are written framed; schema-1 group maps are still read
MAP_SCHEMAS = frozenset({1})        # schemas a msgpack-map payload may carry (prompts, metrics, old groups)
GROUP_MAGIC = b"\xc1LG\x02"
_PREFIX = struct.Struct("<4sI")     # magic, header length

_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")
_local = threading.local()
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce
_NEG_INF_BITS = -(1 << 23)            # float32 -inf (0xff800000) read as int32
_frombuffer = np.frombuffer


def _pack(payload: dict[str, Any]) -> bytes:
    """msgpack with a per-thread Packer: its buffer is reused, whereas ``msgpack.packb`` grows a
    fresh one per call (re-allocating a 0.5 MB group costs ~10x the packing; bench/buffer_throughput)."""
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = msgpack.Packer(use_bin_type=True, default=_plain)
    return packer.pack(payload)


def pack_tokens(ids: Any) -> bytes:
    return _contiguous(ids, _I32).tobytes()


def pack_logprobs(values: Any) -> bytes:
    return _contiguous(values, _F32).tobytes()


def _contiguous(values: Any, dtype: np.dtype) -> np.ndarray:
    """A C-contiguous 1-D array of ``dtype``: the array itself when it already is one (no copy)."""
    return np.ascontiguousarray(values, dtype=dtype).reshape(-1)


def _bin(values: Any, dtype: np.dtype) -> memoryview:
    """Zero-copy view for the Packer: a fresh ``tobytes()`` per response costs more than the packing."""
    return memoryview(_contiguous(values, dtype))


def unpack_tokens(raw: bytes) -> np.ndarray:
    if not isinstance(raw, (bytes, bytearray)) or len(raw) % 4:
        raise InvalidMessage("bad_tokens", "token ids must be int32 bytes")
    return np.frombuffer(raw, dtype=_I32)


def encode_prompt(p: PromptMsg) -> bytes:
    return _pack({
        "schema": SCHEMA_VERSION, "kind": "prompt", "prompt_id": p.prompt_id,
        "data_source": p.data_source, "prompt_ids": _bin(p.prompt_ids, _I32), "answer": p.answer,
        "n_samples": p.n_samples, "max_tokens": p.max_tokens, "step": p.step,
        "min_version": p.min_version, "stage": p.stage, "temperature": p.temperature, "meta": p.meta,
        **({} if p.pin_version is None else {"pin_version": p.pin_version}),   # absent = not pinned
        **({} if p.seed is None else {"seed": p.seed}),                         # absent = the engine's stream
    })


def _group_header(g: Group, lengths: list[int]) -> dict[str, Any]:
    rs = g.responses
    return {
        "schema": GROUP_SCHEMA, "kind": "group", "group_id": g.group_id, "prompt_id": g.prompt_id,
        "data_source": g.data_source, "step": g.step, "stage": g.stage, "max_tokens": g.max_tokens,
        "prompt_ids": _bin(g.prompt_ids, _I32), "answer": g.answer, "actor_id": g.actor_id,
        "created_at": g.created_at, "finished_at": g.finished_at, "lengths": lengths,
        "finish_reason": [r.finish_reason for r in rs], "version_start": [r.version_start for r in rs],
        "version_end": [r.version_end for r in rs], "reward": [float(r.reward) for r in rs],
        "reward_info": [r.reward_info for r in rs],
        **({"trace": g.trace} if g.trace else {}),     # absent = not recorded (older writers)
    }


def _body_offset(header_len: int) -> int:
    """The arrays start 8-byte aligned, so views of a bytes object's data (16-aligned) are aligned."""
    return (_PREFIX.size + header_len + 7) & ~7


def _write_prefix(view: memoryview, head: bytes) -> int:
    """Magic, header length, header and zero pad into ``view``; returns where the arrays start."""
    start = _body_offset(len(head))
    _PREFIX.pack_into(view, 0, GROUP_MAGIC, len(head))
    view[_PREFIX.size:_PREFIX.size + len(head)] = head
    view[_PREFIX.size + len(head):start] = bytes(start - _PREFIX.size - len(head))
    return start


def frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    """A framed payload from a header map and raw array bytes (how tests build bad frames)."""
    head = _pack(header)
    out = bytearray(_body_offset(len(head)) + len(body))
    start = _write_prefix(memoryview(out), head)
    out[start:] = body
    return bytes(out)


def encode_group(g: Group) -> bytes:
    return b"".join(group_frame_parts(g))


def group_frame_parts(g: Group) -> list:
    """The framed group as its pieces, in order: prefix + header + pad, then each response's token
    ids, then each response's log-probs. The arrays are the responses' own (no copy): the writer
    sends the pieces with one scatter-gather system call (buffer/wire.py)."""
    tokens = [_contiguous(r.token_ids, _I32) for r in g.responses]
    logprobs = [_contiguous(r.logprobs, _F32) for r in g.responses]
    head = _pack(_group_header(g, [t.size for t in tokens]))
    prefix = bytearray(_body_offset(len(head)))
    _write_prefix(memoryview(prefix), head)
    return [prefix, *tokens, *logprobs]


def _check_raw(raw: Any, max_bytes: int) -> None:
    if not isinstance(raw, (bytes, bytearray)):
        raise InvalidMessage("not_bytes", type(raw).__name__)
    if len(raw) > max_bytes:
        raise InvalidMessage("oversize", f"{len(raw)} bytes > limit {max_bytes}")


def _unpack_map(raw: bytes, kind: str) -> dict[str, Any]:
    """A schema-1 payload (checked by _check_raw first) as its msgpack map."""
    try:
        msg = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise InvalidMessage("malformed_msgpack", repr(exc)[:200]) from None
    _check_kind(msg, kind, MAP_SCHEMAS)
    return msg


def _check_kind(msg: Any, kind: str, schemas: frozenset[int] | set[int]) -> None:
    if not isinstance(msg, dict):
        raise InvalidMessage("not_a_map", type(msg).__name__)
    if msg.get("schema") not in schemas:
        raise InvalidMessage("unknown_schema", repr(msg.get("schema")))
    if msg.get("kind") != kind:
        raise InvalidMessage("wrong_kind", f"expected {kind!r}, got {msg.get('kind')!r}")


def _field(msg: dict, name: str, types: type | tuple[type, ...]) -> Any:
    value = msg.get(name)
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        raise InvalidMessage("bad_field", f"{name}={value!r:.80} is not {types}")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def decode_prompt(raw: bytes, max_bytes: int = 64 << 20) -> PromptMsg:
    _check_raw(raw, max_bytes)
    msg = _unpack_map(raw, "prompt")
    prompt_ids = unpack_tokens(_field(msg, "prompt_ids", bytes))
    if prompt_ids.size == 0:
        raise InvalidMessage("empty_prompt")
    if int(prompt_ids.min()) < 0:
        raise InvalidMessage("bad_tokens", "negative prompt token id")
    n_samples = _field(msg, "n_samples", int)
    max_tokens = _field(msg, "max_tokens", int)
    if n_samples < 1 or max_tokens < 1:
        raise InvalidMessage("bad_field", f"n_samples={n_samples} max_tokens={max_tokens}")
    return PromptMsg(
        prompt_id=_field(msg, "prompt_id", str), data_source=_field(msg, "data_source", str),
        prompt_ids=prompt_ids, answer=_field(msg, "answer", str), n_samples=n_samples,
        max_tokens=max_tokens, step=_field(msg, "step", int),
        min_version=_field(msg, "min_version", int), stage=_field(msg, "stage", int),
        temperature=_temperature(msg), meta=_field(msg, "meta", dict), pin_version=_pin_version(msg),
        seed=_seed(msg),
    )


def _seed(msg: dict) -> int | None:
    """Optional: a per-prompt sampling seed (a non-negative int that fits vLLM's 64-bit seed)."""
    if "seed" not in msg:
        return None
    value = _field(msg, "seed", int)
    if not 0 <= value < 2**63:
        raise InvalidMessage("bad_field", f"seed={value} must be in [0, 2**63)")
    return value


def _pin_version(msg: dict) -> int | None:
    """Optional (fixed-lag runs only): the exact policy version to sample with."""
    if "pin_version" not in msg:
        return None
    value = _field(msg, "pin_version", int)
    if value < 0 or value < _field(msg, "min_version", int):
        raise InvalidMessage("bad_field", f"pin_version={value} must be >= 0 and >= min_version")
    return value


def _temperature(msg: dict) -> float:
    """Optional: prompts written before it was recorded were sampled at tau = 1."""
    if "temperature" not in msg:
        return 1.0
    value = float(_field(msg, "temperature", (float, int)))
    if not 0 < value < math.inf:
        raise InvalidMessage("bad_field", f"temperature={value} must be finite and > 0")
    return value


_RESPONSE_FIELDS = (("token_ids", bytes), ("logprobs", bytes), ("finish_reason", str), ("version_start", int),
                    ("version_end", int), ("reward", (float, int)), ("reward_info", dict))
_RESPONSE_COLUMNS = ("finish_reason", "version_start", "version_end", "reward", "reward_info")


def decode_group(raw: bytes, max_bytes: int = 256 << 20) -> Group:
    """A framed group (schema 2) or a schema-1 msgpack map; InvalidMessage says what is wrong."""
    _check_raw(raw, max_bytes)
    if raw[:len(GROUP_MAGIC)] == GROUP_MAGIC:
        return _decode_framed_group(raw)
    return _decode_map_group(raw)


def unframe(raw: bytes) -> tuple[Any, int]:
    """A frame's unpacked header and the offset where its arrays start (not yet validated)."""
    if len(raw) < _PREFIX.size:
        raise InvalidMessage("truncated", f"{len(raw)}-byte frame")
    _, head_len = _PREFIX.unpack_from(raw)
    start = _body_offset(head_len)
    if start > len(raw):
        raise InvalidMessage("truncated", f"{head_len}-byte header in a {len(raw)}-byte frame")
    try:
        msg = msgpack.unpackb(memoryview(raw)[_PREFIX.size:_PREFIX.size + head_len], raw=False,
                              strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise InvalidMessage("malformed_msgpack", repr(exc)[:200]) from None
    return msg, start


def _decode_framed_group(raw: bytes) -> Group:
    msg, start = unframe(raw)
    _check_kind(msg, "group", {GROUP_SCHEMA})
    lengths = _field(msg, "lengths", list)
    columns = [_field(msg, name, list) for name in _RESPONSE_COLUMNS]
    if not lengths:
        raise InvalidMessage("empty_group")
    if any(len(column) != len(lengths) for column in columns):
        raise InvalidMessage("bad_field", f"per-response lists disagree with lengths ({len(lengths)} responses)")
    if not all(type(n) is int and n >= 0 for n in lengths):
        raise InvalidMessage("bad_field", f"lengths={lengths!r:.80} must be non-negative ints")
    total = sum(lengths)
    if len(raw) - start != 8 * total:
        raise InvalidMessage("length_mismatch", f"{len(raw) - start} array bytes for {total} tokens "
                                                f"(int32 ids + float32 log-probs: {8 * total})")
    tokens = _frombuffer(raw, _I32, total, start)
    logprobs = _frombuffer(raw, _F32, total, start + 4 * total)
    responses, offset = [], 0
    for index, (n, fr, v0, v1, reward, info) in enumerate(zip(lengths, *columns)):
        responses.append(_response(index, tokens[offset:offset + n], logprobs[offset:offset + n],
                                   fr, v0, v1, reward, info))
        offset += n
    _check_values(tokens, logprobs, responses)
    return _group(msg, responses)


def _decode_map_group(raw: bytes) -> Group:
    """Schema 1: one msgpack map, each response's arrays as bins (runs written before schema 2)."""
    msg = _unpack_map(raw, "group")
    items = _field(msg, "responses", list)
    if not items:
        raise InvalidMessage("empty_group")
    responses = []
    for index, r in enumerate(items):
        if type(r) is not dict:
            raise InvalidMessage("bad_response", f"response {index} is not a map")
        tok, lp = r.get("token_ids"), r.get("logprobs")
        if type(tok) is not bytes or type(lp) is not bytes:
            for name, types in _RESPONSE_FIELDS[:2]:
                _field(r, name, types)        # raises with the field's name
            raise InvalidMessage("bad_field", f"response {index}: arrays have a subclassed type")
        n = len(tok)
        if n & 3 or len(lp) != n:
            if n & 3:
                raise InvalidMessage("bad_tokens", "token ids must be int32 bytes")
            if len(lp) & 3:
                raise InvalidMessage("bad_logprobs", "log-probs must be float32 bytes")
            raise InvalidMessage("length_mismatch", f"response {index}: {n // 4} tokens vs {len(lp) // 4} log-probs")
        responses.append(_response(index, _frombuffer(tok, _I32), _frombuffer(lp, _F32),
                                   *(r.get(name) for name in _RESPONSE_COLUMNS)))
    total = sum(r.token_ids.size for r in responses)   # one pass over warm copies, not 3 calls per response
    _check_values(np.concatenate([r.token_ids for r in responses], out=_scratch("tokens", _I32, total)),
                  np.concatenate([r.logprobs for r in responses], out=_scratch("logprobs", _F32, total)),
                  responses)
    return _group(msg, responses)


def _response(index: int, tokens: np.ndarray, logprobs: np.ndarray, fr: Any, v0: Any, v1: Any,
              reward: Any, info: Any) -> Response:
    """One response's scalars checked: one exact-type test per field on the fast path, the
    descriptive message only once something is wrong."""
    if not (type(fr) is str and type(v0) is int and type(v1) is int
            and (type(reward) is float or type(reward) is int) and type(info) is dict):
        values = dict(zip(_RESPONSE_COLUMNS, (fr, v0, v1, reward, info)))
        for name, types in _RESPONSE_FIELDS[2:]:
            _field(values, name, types)       # raises with the field's name
        raise InvalidMessage("bad_field", f"response {index}: a field has a subclassed type")
    if not math.isfinite(reward):
        raise InvalidMessage("nonfinite_reward", f"response {index}")
    if v0 < 0 or v1 < v0:
        raise InvalidMessage("bad_versions", f"response {index}: start={v0} end={v1}")
    return Response(tokens, logprobs, fr, v0, v1, float(reward), info)


def _scratch(name: str, dtype: np.dtype, size: int) -> np.ndarray:
    """A per-thread reusable buffer of at least ``size`` elements (warm memory: no page faults)."""
    buf = getattr(_local, name, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1 << 16), dtype=dtype)
        setattr(_local, name, buf)
    return buf[:size]


def _check_values(tokens: np.ndarray, logprobs: np.ndarray, responses: list[Response]) -> None:
    """Token ids >= 0; log-probs finite and <= 0 (1e-4 slack for sampler rounding).

    Fast path, two reductions over the whole group: the tokens' min, and the max of the log-probs'
    bits read as int32, which is below that of -inf (0xff800000) only if every log-prob is a
    negative finite float. A log-prob of +0.0 or above (a token of probability ~1) takes the float
    min and max instead (a NaN propagates into both). Only a bad group takes the slow path, which
    names the offending response.
    """
    if tokens.size == 0:
        return
    if _MIN(tokens) >= 0:
        if _MAX(logprobs.view(_I32)) < _NEG_INF_BITS:
            return
        lo, hi = float(_MIN(logprobs)), float(_MAX(logprobs))
        if math.isfinite(lo) and math.isfinite(hi) and hi <= 1e-4:
            return
    for i, r in enumerate(responses):
        if r.token_ids.size and int(_MIN(r.token_ids)) < 0:
            raise InvalidMessage("bad_tokens", f"response {i}: negative token id")
        if not np.isfinite(r.logprobs).all():
            raise InvalidMessage("nonfinite_logprobs", f"response {i}")
        if (r.logprobs > 1e-4).any():
            raise InvalidMessage("positive_logprobs", f"response {i}: log-probs must be <= 0")


def _group(msg: dict, responses: list[Response]) -> Group:
    group_id = _field(msg, "group_id", str)
    if not group_id:
        raise InvalidMessage("bad_field", "empty group_id")   # the learner's idempotency key
    return Group(
        group_id=group_id, prompt_id=_field(msg, "prompt_id", str),
        data_source=_field(msg, "data_source", str), step=_field(msg, "step", int),
        stage=_field(msg, "stage", int), max_tokens=_max_tokens(msg), prompt_ids=unpack_tokens(_field(msg, "prompt_ids", bytes)),
        answer=_field(msg, "answer", str), actor_id=_field(msg, "actor_id", str),
        created_at=float(_field(msg, "created_at", (float, int))),
        finished_at=float(_field(msg, "finished_at", (float, int))),
        responses=responses, trace=_trace(msg),
    )


def _trace(msg: dict) -> dict[str, float]:
    """Optional hop times (``messages.TRACE_HOPS``; a newer writer's extra hops are kept too): at most
    32 string keys with finite numbers."""
    if "trace" not in msg:
        return {}
    trace = _field(msg, "trace", dict)
    if len(trace) > 32:
        raise InvalidMessage("bad_field", f"trace has {len(trace)} hops (at most 32)")
    out = {}
    for hop, value in trace.items():
        if type(hop) is not str or type(value) not in (float, int) or not math.isfinite(value):
            raise InvalidMessage("bad_field", f"trace[{hop!r:.40}]={value!r:.40} is not a hop name with a finite time")
        out[hop] = float(value)
    return out


def _max_tokens(msg: dict) -> int:
    """Optional: groups written before it was recorded read as 0 (unknown)."""
    if "max_tokens" not in msg:
        return 0
    value = _field(msg, "max_tokens", int)
    if value < 0:
        raise InvalidMessage("bad_field", f"max_tokens={value} < 0")
    return value


def _plain(value: Any) -> Any:
    """msgpack fallback for numpy / torch scalars and arrays that end up in metrics rows."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "tolist"):          # torch.Tensor without importing torch
        return value.tolist()
    raise TypeError(f"cannot msgpack {type(value).__name__}")


def encode_map(payload: dict[str, Any]) -> bytes:
    """Metrics / control payloads: a plain map stamped with the schema version.

    Integer keys are allowed (e.g. a lag histogram ``{lag: count}``); numpy scalars become
    Python numbers.
    """
    return _pack({"schema": SCHEMA_VERSION, **payload})


def decode_map(raw: bytes) -> dict[str, Any]:
    if not isinstance(raw, (bytes, bytearray)):
        raise InvalidMessage("not_bytes", type(raw).__name__)
    try:
        msg = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise InvalidMessage("malformed_msgpack", repr(exc)[:200]) from None
    if not isinstance(msg, dict) or msg.get("schema") not in MAP_SCHEMAS:
        raise InvalidMessage("unknown_schema", repr(msg)[:80])
    return msg
