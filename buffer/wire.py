"""Gathered writes: a group's frame goes to the socket as its pieces, never joined into one buffer.

A 4K-token group of 16 responses is 0.5 MB in 33 pieces (header, 16 token arrays, 16 log-prob
arrays). Joining them costs a 0.5 MB copy per group; handing them to redis-py as they are costs
one ``sendall`` system call per piece. Here a :class:`Parts` argument is packed as one RESP bulk
string whose body is the caller's buffers, and :class:`GatherConnection` writes the whole
command with ``sendmsg`` (one scatter-gather system call per socket buffer's worth).
bench/buffer_throughput.py: buffer/raw-tuned 0.74 -> 0.77 with it, though that raw path uses it too.

TLS sockets have no ``sendmsg``: an ``rediss://`` client keeps redis-py's SSL connection and
sends the pieces one ``sendall`` each (same bytes on the wire).
"""

from __future__ import annotations

import socket
from typing import Any, Iterable

import redis
from redis.connection import PythonRespSerializer
from redis.exceptions import ConnectionError, TimeoutError

_IOV_MAX = 1024   # Linux's limit on buffers per sendmsg


class Parts:
    """One command argument given as several buffers; Redis receives their concatenation."""

    __slots__ = ("views", "nbytes")

    def __init__(self, buffers: Iterable[Any]):
        self.views = [v for v in (memoryview(b).cast("B") for b in buffers) if v.nbytes]
        self.nbytes = sum(v.nbytes for v in self.views)

    def __len__(self) -> int:
        return self.nbytes

    def prefix(self, n: int) -> bytes:
        """The first ``n`` bytes (a dead letter keeps only a prefix of an oversize payload)."""
        out = bytearray()
        for view in self.views:
            if len(out) >= n:
                break
            out += view[:n - len(out)]
        return bytes(out)


class GatherPacker(PythonRespSerializer):
    """redis-py's RESP packer, plus :class:`Parts` arguments packed without joining them."""

    def __init__(self) -> None:
        # the bytes encoding of connect()'s clients (utf-8, no response decoding); redis-py's
        # 6000-byte cutoff for sending a large argument as its own piece
        super().__init__(6000, redis.connection.Encoder("utf-8", "strict", False).encode)

    def pack(self, *args: Any) -> list:
        if not any(type(arg) is Parts for arg in args):
            return super().pack(*args)
        if isinstance(args[0], str):   # 'SCRIPT LOAD' style names are sent as separate words
            args = (*args[0].encode().split(), *args[1:])
        out: list = []
        head = [b"*%d\r\n" % len(args)]
        for arg in args:
            if type(arg) is Parts:
                head.append(b"$%d\r\n" % arg.nbytes)
                out.append(b"".join(head))
                out.extend(arg.views)
                head = [b"\r\n"]
            else:
                value = bytes(self.encode(arg))
                head += (b"$%d\r\n" % len(value), value, b"\r\n")
        out.append(b"".join(head))
        return out


class GatherConnection(redis.Connection):
    """A TCP connection that writes each packed command with ``sendmsg``."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if isinstance(command, (str, bytes)) or len(command) == 1:
            return super().send_packed_command(command, check_health)
        # redis-py keeps the socket in ``_sock`` and exposes no public handle to it (its own
        # send_packed_command reads it the same way); tests/integration/test_buffer_wire.py fails if it moves
        if not self._sock:
            self.connect_check_health(check_health=False)
        if check_health:
            self.check_health()
        try:
            send_all(self._sock, command)
        except socket.timeout:            # the errors and their mapping are redis-py's, so the
            self.disconnect()             # client's retry policy sees what it always sees
            raise TimeoutError("Timeout writing to socket")
        except OSError as e:
            self.disconnect()
            errno, message = ("UNKNOWN", e.args[0]) if len(e.args) == 1 else e.args[:2]
            raise ConnectionError(f"Error {errno} while writing to socket. {message}.")
        except BaseException:             # a half-written command: the connection is unusable
            self.disconnect()
            raise


def send_all(sock: socket.socket, buffers: list) -> None:
    """``sendall`` for a list of buffers: repeat ``sendmsg`` until every byte is written."""
    pending = buffers
    while pending:
        pending = _unsent(pending, sock.sendmsg(pending[:_IOV_MAX]))


def _unsent(pieces: list, sent: int) -> list:
    """The pieces left after ``sent`` bytes went out; a partly sent one becomes a view of its rest."""
    done = 0
    while done < len(pieces):
        size = _nbytes(pieces[done])
        if sent < size:
            break
        sent -= size
        done += 1
    rest = pieces[done:]
    if sent:
        rest[0] = memoryview(rest[0]).cast("B")[sent:]
    return rest


def _nbytes(piece: Any) -> int:
    return piece.nbytes if type(piece) is memoryview else len(piece)
