"""Messages for the buffer's tests: a group in the old schema, and valid payloads tampered with.
(Well-formed synthetic prompts and groups: ``bench.synthetic``.)"""

from __future__ import annotations

import msgpack
import numpy as np

from buffer.codec import GROUP_MAGIC, frame, pack_logprobs, pack_tokens, unframe
from buffer.messages import Group


def encode_group_v1(g: Group) -> bytes:
    """A group in schema 1 (one msgpack map, arrays as bins): what runs wrote before schema 2."""
    return msgpack.packb({
        "schema": 1, "kind": "group", "group_id": g.group_id, "prompt_id": g.prompt_id,
        "data_source": g.data_source, "step": g.step, "stage": g.stage,
        "prompt_ids": pack_tokens(g.prompt_ids), "answer": g.answer, "actor_id": g.actor_id,
        "created_at": g.created_at, "finished_at": g.finished_at,
        "responses": [{"token_ids": pack_tokens(r.token_ids), "logprobs": pack_logprobs(r.logprobs),
                       "finish_reason": r.finish_reason, "version_start": r.version_start,
                       "version_end": r.version_end, "reward": float(r.reward), "reward_info": r.reward_info}
                      for r in g.responses],
    }, use_bin_type=True)


def _unframe(payload: bytes) -> tuple[dict, list[bytes], list[bytes]]:
    """A framed group's header and each response's raw token and log-prob bytes."""
    header, start = unframe(payload)
    ends = np.cumsum([0, *header["lengths"]]) * 4
    n = int(ends[-1])
    tokens = [payload[start + a:start + b] for a, b in zip(ends[:-1], ends[1:])]
    logprobs = [payload[start + n + a:start + n + b] for a, b in zip(ends[:-1], ends[1:])]
    return header, tokens, logprobs


def tamper(payload: bytes, **changes) -> bytes:
    """Re-pack a valid payload with top-level fields replaced (``None`` deletes a field).

    A framed group keeps its arrays; its header fields are the ones replaced.
    """
    framed = payload[:len(GROUP_MAGIC)] == GROUP_MAGIC
    if framed:
        msg, tokens, logprobs = _unframe(payload)
    else:
        msg = msgpack.unpackb(payload, raw=False)
    for key, value in changes.items():
        if value is None:
            msg.pop(key, None)
        else:
            msg[key] = value
    if framed:
        return frame(msg, b"".join(tokens) + b"".join(logprobs))
    return msgpack.packb(msg, use_bin_type=True)


def tamper_response(payload: bytes, index: int = 0, **changes) -> bytes:
    """Like :func:`tamper`, on one response of a group payload (``token_ids`` / ``logprobs``: raw bytes).

    In a framed group new token bytes also set that response's length (``len // 4``), so log-prob
    bytes of another length make the arrays disagree with the header.
    """
    if payload[:len(GROUP_MAGIC)] != GROUP_MAGIC:
        msg = msgpack.unpackb(payload, raw=False)
        msg["responses"][index].update(changes)
        return msgpack.packb(msg, use_bin_type=True)
    header, tokens, logprobs = _unframe(payload)
    for key, value in changes.items():
        if key == "token_ids":
            tokens[index] = value
            header["lengths"][index] = len(value) // 4
        elif key == "logprobs":
            logprobs[index] = value
        else:
            header[key][index] = value
    return frame(header, b"".join(tokens) + b"".join(logprobs))
