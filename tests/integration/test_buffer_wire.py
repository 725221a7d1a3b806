"""Gathered writes (buffer/wire.py) against a real redis-server: the server stores exactly the
concatenation of the pieces, through plain commands, scripts and MULTI pipelines."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
import redis

from buffer.connection import connect
from buffer.wire import GatherConnection, GatherPacker, Parts, send_all

pytestmark = pytest.mark.integration


def _pieces(seed: int, n: int, tokens: int) -> list:
    rng = np.random.default_rng(seed)
    out: list = [b"head\x00\r\n$", b""]                                # CR LF and '$' inside a piece, an empty one
    for _ in range(n):
        out.append(rng.integers(0, 50_000, tokens, dtype=np.int32))
        out.append(-rng.random(tokens, dtype=np.float32))
    return out


@pytest.fixture
def client(redis_server):
    c = connect(redis_server.url)
    assert isinstance(c.connection_pool.get_connection(), GatherConnection)
    yield c
    c.close()


@pytest.mark.parametrize("tokens", [1, 4096, 300_000])               # 300K x 2 x 4 x 4 B = 9.6 MB: many partial sendmsg
def test_parts_reach_redis_as_their_concatenation(client, run_id, tokens):
    pieces = _pieces(tokens, 4, tokens)
    expected = b"".join(pieces)
    client.set(f"{run_id}:a", Parts(pieces))
    assert client.get(f"{run_id}:a") == expected
    entry = client.xadd(f"{run_id}:s", {"data": Parts(pieces), "n": 4})          # a non-Parts arg after it
    assert client.xrange(f"{run_id}:s") == [(entry, {b"data": expected, b"n": b"4"})]
    script = client.register_script("return #ARGV[1] .. ':' .. ARGV[2]")
    assert script(keys=[], args=[Parts(pieces), "x"]) == f"{len(expected)}:x".encode()
    pipe = client.pipeline(transaction=True)
    pipe.set(f"{run_id}:b", Parts(pieces)).strlen(f"{run_id}:b").get(f"{run_id}:b")
    assert pipe.execute() == [True, len(expected), expected]


def test_packer_is_redis_pys_for_plain_commands():
    ours, theirs = GatherPacker(), redis.Connection()._command_packer
    for args in (("SET", "k", b"v" * 10_000), ("XADD", "s", "*", "data", memoryview(b"abc")), ("CONFIG GET", "x"),
                 ("HINCRBY", "h", "f", -3), ("SET", "k", 1.5)):
        assert b"".join(map(bytes, ours.pack(*args))) == b"".join(map(bytes, theirs.pack(*args)))
    parts = Parts([b"ab", np.array([1], np.int32), b""])
    assert parts.prefix(100) == b"ab\x01\x00\x00\x00" and parts.prefix(3) == b"ab\x01" and parts.prefix(0) == b""


def test_send_all_survives_partial_writes():
    """A small socket buffer and a slow reader: each sendmsg takes only part of the pieces."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pieces = [*Parts(_pieces(7, 8, 5000)).views, b"tail"]                # bytes and memoryviews mixed
    expected = b"".join(pieces)
    received = bytearray()

    def read() -> None:
        while len(received) < len(expected):
            received.extend(b.recv(1000))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        send_all(a, pieces)
        reader.join(10)
    finally:
        a.close()
        b.close()
    assert bytes(received) == expected


def test_write_error_is_redis_pys_connection_error(redis_server, run_id):
    """A dead peer surfaces as redis.ConnectionError (what connect()'s retry policy handles)."""
    conn = connect(redis_server.url).connection_pool.get_connection()
    conn.connect()
    conn._sock.shutdown(socket.SHUT_WR)
    with pytest.raises(redis.ConnectionError, match="writing to socket"):
        conn.send_packed_command([b"*1\r\n", b"$4\r\nPING\r\n"], check_health=False)
    assert conn._sock is None                                          # disconnected: the next use reconnects
