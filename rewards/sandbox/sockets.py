"""Bytes queued in the sandbox's unix-socket buffers, for the memory watchdog where no cgroup counts them.

Why: a program can park ~2 MiB of kernel memory in every socketpair it fills and never reads, which
neither RSS nor RLIMIT_AS sees (32 processes x 128 pairs would hold gigabytes). A memory cgroup charges
that memory; without one, init asks the kernel (NETLINK_SOCK_DIAG, the interface `ss -x -m` uses) for
every unix socket of its network namespace — the sandbox's own, so every socket in it is the
program's — and adds their send and receive allocations to the RSS it checks. Only meaningful inside
a private network namespace; loaded by path from init.py (stdlib only).
"""

import socket
import struct

NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_MEMINFO, UNIX_DIAG_MEMINFO = 0x20, 5  # linux/unix_diag.h
_HEADER = struct.Struct("=IHHII")     # struct nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBHIIIII")  # struct unix_diag_req: family, protocol, pad, states, ino, show, cookie[2]
_DIAG_MSG_BYTES = 16                  # struct unix_diag_msg, followed by attributes
_ATTR = struct.Struct("=HH")          # struct rtattr: len, type
_MEMINFO = struct.Struct("=III")      # SK_MEMINFO_RMEM_ALLOC, _RCVBUF, _WMEM_ALLOC (first three of the array)


class UnixSocketMemory:
    """`held()` -> bytes allocated to the receive and send queues of every unix socket in our netns."""

    def __init__(self):
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self._seq = 0
        self.held()  # fail here, at set-up, if the kernel has no unix_diag

    def close(self) -> None:
        self._sock.close()

    def held(self) -> int:
        self._seq += 1
        request = _REQUEST.pack(socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_MEMINFO, 0xFFFFFFFF, 0xFFFFFFFF)
        self._sock.send(_HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP,
                                     self._seq, 0) + request)
        total = 0
        while True:
            data = self._sock.recv(1 << 16)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind, _, seq, _ = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    raise OSError("malformed netlink message")
                if seq == self._seq:
                    if kind == NLMSG_DONE:
                        return total
                    if kind == NLMSG_ERROR:
                        (errno_neg,) = struct.unpack_from("=i", data, offset + _HEADER.size)
                        raise OSError(-errno_neg, "sock_diag dump refused")
                    total += _meminfo(data, offset + _HEADER.size + _DIAG_MSG_BYTES, offset + length)
                offset += (length + 3) & ~3


def _meminfo(data: bytes, start: int, end: int) -> int:
    while start + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, start)
        if length < _ATTR.size:
            break
        if kind == UNIX_DIAG_MEMINFO and length >= _ATTR.size + _MEMINFO.size:
            rmem, _, wmem = _MEMINFO.unpack_from(data, start + _ATTR.size)
            return rmem + wmem
        start += (length + 3) & ~3
    return 0
