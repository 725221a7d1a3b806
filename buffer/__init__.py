"""The Redis-backed, versioned trajectory buffer (DESIGN.md §2-3, §10).

Import the classes from here; pure helpers (``buffer.versions``, ``buffer.codec``) import no
server machinery beyond redis-py.
"""

from buffer.config import BufferConfig
from buffer.connection import connect
from buffer.groups import BackpressureTimeout
from buffer.keys import RunKeys
from buffer.messages import Group, InvalidMessage, PromptMsg, Response
from buffer.server import EmbeddedRedis, open_buffer_server
from buffer.streams import RunBuffer

__all__ = ["BackpressureTimeout", "BufferConfig", "EmbeddedRedis", "Group", "InvalidMessage", "PromptMsg",
           "Response", "RunBuffer", "RunKeys", "connect", "open_buffer_server"]
