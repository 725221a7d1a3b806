"""The channel between an assert test's program and its judge (rewards/sandbox/judge.py): framed JSON
messages carrying values as tagged, exact builtin data.

Loaded by path by init.py (stdlib only) and used on both sides of a socketpair. The program
side is untrusted, so decoding builds nothing but plain values and `Remote` stand-ins: no pickle, no
marshal, no eval; types are exact (a subclass of int with a lying `__eq__` cannot cross), depth and
frame size are capped. Encoding, JSON value -> Python value:

    null/true/false/number/string  as themselves        {"t": [...]} tuple    {"s": [...]} set
    [...]                          list                 {"f": [...]} frozenset
    {"d": [[k, v], ...]}           dict                 {"b": "hex"} bytes    {"c": [re, im]} complex
    {"i": "hex"}                   int beyond 2**53 (no str-conversion digit limit on either side)
    {"h": n, "type": name}         an object that stays in the program's process (see the judge)
    {"m": name}                    a module (the judge uses its own copy, see judge._module)
"""

import json
import os
import struct
import types

MAX_DEPTH = 100
_SAFE_INT = 1 << 53


class ChannelClosed(Exception):
    """The other side closed the channel or died."""


def encode(x, handle=None, depth: int = 0):
    """JSON-ready form of `x`. Objects that are not plain data become `handle(x)` (a tag dict) when a
    `handle` callback is given, else raise TypeError."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if -_SAFE_INT < x < _SAFE_INT else {"i": format(x, "x")}
    if t is float:
        return x
    d = depth + 1
    if t is list:
        return [encode(v, handle, d) for v in x]
    if t in (tuple, set, frozenset):
        return {{tuple: "t", set: "s", frozenset: "f"}[t]: [encode(v, handle, d) for v in x]}
    if t is dict:
        return {"d": [[encode(k, handle, d), encode(v, handle, d)] for k, v in x.items()]}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [x.real, x.imag]}
    if t is types.ModuleType:
        return {"m": x.__name__} if type(x.__name__) is str else handle(x)
    if handle is None:
        raise TypeError(f"a {t.__name__} object cannot be passed to the program (plain data only)")
    return handle(x)


def decode(obj, remote=None, depth: int = 0):
    """Inverse of encode; `remote(tag)` turns {"h": ...} and {"m": ...} tags into objects (None: refused)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    t = type(obj)
    if obj is None or t in (bool, int, float, str):
        return obj
    d = depth + 1
    if t is list:
        return [decode(v, remote, d) for v in obj]
    if t is not dict:
        raise ValueError("malformed value")
    if "h" in obj or "m" in obj:
        if remote is None:
            raise ValueError("an object reference where plain data was required")
        return remote(obj)
    if len(obj) != 1:
        raise ValueError("malformed value")
    ((tag, body),) = obj.items()
    if tag in ("t", "s", "f") and type(body) is list:
        return {"t": tuple, "s": set, "f": frozenset}[tag](decode(v, remote, d) for v in body)
    if tag == "d" and type(body) is list:
        return {decode(k, remote, d): decode(v, remote, d) for k, v in body}
    if tag == "i" and type(body) is str:
        return int(body, 16)
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(v) in (int, float) for v in body):
        return complex(*body)
    raise ValueError(f"malformed value (tag {tag!r})")


def send(fd: int, message) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    view = memoryview(struct.pack("!I", len(data)) + data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ChannelClosed("the other side is gone") from e


def recv(fd: int, max_bytes: int):
    """The next message; ChannelClosed at end of stream; ValueError for a frame over `max_bytes`."""
    (size,) = struct.unpack("!I", _read_exact(fd, 4))
    if size > max_bytes:
        raise ValueError(f"message of {size} bytes is over the {max_bytes}-byte cap")
    return json.loads(_read_exact(fd, size))


def _read_exact(fd: int, n: int) -> bytes:
    chunks, need = [], n
    while need:
        try:
            chunk = os.read(fd, min(need, 1 << 20))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise ChannelClosed("the other side closed the channel")
        chunks.append(chunk)
        need -= len(chunk)
    return b"".join(chunks)
