"""The books of a run: every prompt ends as one group or one dead letter; every group is consumed once.

Read-only, from the counters the buffer's Lua scripts keep atomically with each write/ACK
(``buffer.scripts``) plus the live lengths of the streams:

    prompts_issued  = groups_written + prompts_deadlettered + prompts_open
    groups_written  = groups_consumed + groups_deadlettered + groups_duplicate_skipped + groups_open
    groups_consumed = trained + filtered + stale + already_trained + evaluated

``*_open`` entries are in their stream and not ACKed yet (waiting, or pending in a consumer: a dead
one's are reclaimed). Whatever the equations miss is ``lost``. ``duplicates`` counts groups
consumed twice under one group id (never trained twice: such a group is skipped); late duplicate
groups of an already answered prompt are dropped at write (``groups_duplicate_dropped``) and
never enter the books.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import redis

from buffer.groups import GROUP_OUTCOMES
from buffer.keys import RunKeys


@dataclass(frozen=True)
class Audit:
    prompts_issued: int
    prompts_answered: int          # = groups written
    prompts_deadlettered: int
    prompts_open: int
    groups_written: int
    groups_consumed: int
    groups_deadlettered: int       # rejected at read (bad payload, poison)
    groups_duplicate_skipped: int  # a second entry of an already consumed group id, ACKed unused
    groups_duplicate_dropped: int  # a late group for an already answered prompt, never written
    groups_open: int
    outcomes: dict                 # trained / filtered / stale / already_trained / evaluated
    duplicates: int                # effective ACKs of an already consumed group id (must be 0)

    @property
    def prompts_lost(self) -> int:
        return self.prompts_issued - self.prompts_answered - self.prompts_deadlettered - self.prompts_open

    @property
    def groups_lost(self) -> int:
        return (self.groups_written - self.groups_consumed - self.groups_deadlettered
                - self.groups_duplicate_skipped - self.groups_open)

    @property
    def outcomes_unexplained(self) -> int:
        return self.groups_consumed - sum(self.outcomes.values())

    @property
    def balanced(self) -> bool:
        return self.prompts_lost == 0 and self.groups_lost == 0 and self.duplicates == 0 \
            and self.outcomes_unexplained == 0

    def as_dict(self) -> dict:
        return {**asdict(self), "prompts_lost": self.prompts_lost, "groups_lost": self.groups_lost,
                "outcomes_unexplained": self.outcomes_unexplained, "balanced": self.balanced}

    def line(self) -> str:
        o = self.outcomes
        return (f"prompts issued {self.prompts_issued} = answered {self.prompts_answered} + dead-lettered "
                f"{self.prompts_deadlettered} + open {self.prompts_open} (lost {self.prompts_lost}); "
                f"groups written {self.groups_written} = consumed {self.groups_consumed} (trained "
                f"{o['trained']}, filtered {o['filtered']}, stale {o['stale']}, already trained "
                f"{o['already_trained']}, evaluated {o['evaluated']}) + dead-lettered {self.groups_deadlettered}"
                f" + duplicate skipped {self.groups_duplicate_skipped} + open {self.groups_open} "
                f"(lost {self.groups_lost}); consumed twice {self.duplicates}; late duplicates dropped "
                f"{self.groups_duplicate_dropped}")


def audit(client: redis.Redis, run_id: str) -> Audit:
    """The books of ``run_id`` now (consistent as of one MULTI)."""
    keys = RunKeys(run_id)
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(keys.counters)
    for spec in (keys.prompt_stream, keys.group_stream):
        pipe.xlen(spec.key)
        pipe.zcard(spec.acked)
    raw, n_prompts, n_prompts_acked, n_groups, n_groups_acked = pipe.execute()
    c = {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in raw.items()}
    return Audit(
        prompts_issued=c.get("prompts_issued", 0), prompts_answered=c.get("groups_written", 0),
        prompts_deadlettered=c.get("prompts_deadlettered", 0), prompts_open=n_prompts - n_prompts_acked,
        groups_written=c.get("groups_written", 0), groups_consumed=c.get("groups_consumed", 0),
        groups_deadlettered=c.get("groups_deadlettered", 0),
        groups_duplicate_skipped=c.get("groups_duplicate_skipped", 0),
        groups_duplicate_dropped=c.get("groups_duplicate_dropped", 0), groups_open=n_groups - n_groups_acked,
        outcomes={o: c.get(f"groups_{o}", 0) for o in GROUP_OUTCOMES},
        duplicates=c.get("groups_consumed_twice", 0))
