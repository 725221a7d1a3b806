"""Per-problem accuracy from the groups stream, for online filtering at stage starts.

Reads the stream with XRANGE (not through a consumer group), so it never takes data away from
the learner; it only needs to keep up within the buffer's retention window.
"""

from __future__ import annotations

from collections import defaultdict

from buffer.codec import decode_group
from buffer.messages import InvalidMessage


class PromptStats:
    def __init__(self, buffer):
        self.buffer = buffer
        self.last_id = "-"
        self.correct: dict[str, int] = defaultdict(int)
        self.total: dict[str, int] = defaultdict(int)

    def update(self) -> PromptStats:
        client, key = self.buffer.client, self.buffer.keys.groups
        while True:
            start = "-" if self.last_id == "-" else f"({self.last_id}"
            entries = client.xrange(key, min=start, count=512)
            if not entries:
                return self
            for entry_id, fields in entries:
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                try:
                    group = decode_group(next(iter(fields.values())))
                except (InvalidMessage, StopIteration):
                    continue                      # the learner's read dead-letters it
                problem = group.prompt_id.split("-", 2)[-1]
                self.total[problem] += len(group.responses)
                self.correct[problem] += sum(r.reward_info.get("reason") == "correct" for r in group.responses)

    def solved(self) -> set[str]:
        """Problems whose every sampled response so far was correct (accuracy 1)."""
        return {p for p, n in self.total.items() if n and self.correct[p] == n}
