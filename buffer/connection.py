"""How every process of a run connects to its Redis: retries across restarts, tuned sockets.

:func:`connect` is the one place clients are made (buffer, monitor, notebook); the server
process itself is ``buffer.server``.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.retry import Retry

from buffer.wire import GatherConnection, GatherPacker

SOCKET_READ_SIZE = 1 << 20


class DeadlineRetry(Retry):
    """Retry connection errors, timeouts and LOADING for ``wait_s`` seconds, with backoff.

    A deadline, not a count: redis-py nests the retry of the connect inside the retry of the
    command, so counted retries multiply (60 x 60). Wrong credentials are never retried.
    """

    def __init__(self, wait_s: float):
        # our own copies: the loop below reads them, not Retry's private attributes
        self.backoff = ExponentialBackoff(cap=1.0, base=0.05)
        self.retryable = (redis.ConnectionError, redis.TimeoutError, socket.timeout)
        super().__init__(self.backoff, retries=max(int(wait_s), 1), supported_errors=self.retryable)
        self.wait_s = wait_s

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        deadline = time.monotonic() + self.wait_s
        failures = 0
        while True:
            try:
                return do()
            except self.retryable as error:
                if isinstance(error, (AuthenticationError, AuthorizationError)) or (
                        is_retryable is not None and not is_retryable(error)):
                    raise
                failures += 1
                fail(error, failures) if with_failure_count else fail(error)
                if time.monotonic() >= deadline:
                    raise
                time.sleep(self.backoff.compute(failures))


def connect(url: str, *, wait_s: float = 60.0) -> redis.Redis:
    """A client that rides out a restarting server.

    Connection errors, timeouts and ``LOADING`` (AOF replay) are retried with exponential
    backoff for about ``wait_s`` seconds. Retried writes are safe here: the buffer's writes are
    idempotent (a retried put_group finds its prompt already ACKed; a retried ACK is a no-op).
    ``socket_timeout`` is 30 s, so blocking reads are kept shorter than that by the callers.
    ``socket_read_size`` is 1 MiB (redis-py: 32 KiB): a 0.5-8 MB group then takes a few recv
    calls instead of hundreds (measured -25% client CPU per read of a 4K-token group).
    Commands are written with one ``sendmsg`` each, and a group's arrays are never joined into one
    buffer first (buffer/wire.py).
    """
    gather = {"connection_class": GatherConnection} if urlparse(url).scheme == "redis" else {}
    return redis.Redis.from_url(
        url, decode_responses=False, health_check_interval=30, socket_timeout=30.0,
        socket_connect_timeout=5.0, socket_keepalive=True, socket_read_size=SOCKET_READ_SIZE,
        retry=DeadlineRetry(wait_s), command_packer=GatherPacker(), **gather)
