"""A learner step's critical path: where the time of one version's round trip goes (``path/*`` metrics).

One round trip of step s, as unix times: the learner publishes the version the step's prompts
needed (``anchor``: the step's oldest admissible version, ``StepClock.min_version(s)``; strict
on-policy: the version the step starts at) -> each actor has it loaded -> the step's prompts
are issued, taken by an actor, started in its engine -> their groups are generated, scored and
written -> the learner has read the D_R valid groups -> training is done. Every group a step reads
(stale ones of earlier steps aside) carries its hop times (``Group.trace``, written by the actor;
``written`` is its entry id in the groups stream, ``read`` when the learner got it).

The metrics, in seconds after the anchor's publish started (negative: before it, e.g. prompts
issued ahead of the version under a lag, or groups generated during an earlier step):

* ``path/<hop>_first`` / ``path/<hop>_last`` over the step's groups for issued, taken, loaded,
  started, generated, scored, written; ``path/published`` (the version is in the buffer),
  ``path/read`` (the D_R-th valid group read), ``path/trained`` (the step's last update done);
* ``path/seg/<hop>``: the critical path as consecutive segments that sum to ``path/trained``
  (what the notebook stacks): each hop's *last* time, as a running maximum, minus the one before
  it, in the order publish, load, issue, take, start, generate, score, write, read, train;
* ``path/gen_phase``: ``read - published``, the step's generation phase as the learner sees it
  (from the weights being available to having its data); ``path/groups`` and ``path/tokens``:
  the groups and response tokens it covers (``bench/step_path.py`` times bare ``LLM.generate``
  on as many).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from buffer.keys import entry_time
from buffer.messages import Group

# the chain of the critical path: (segment name, the hop whose last time ends it)
CHAIN = (("publish", "published"), ("load", "loaded"), ("issue", "issued"), ("take", "taken"),
         ("start", "started"), ("generate", "generated"), ("score", "scored"), ("write", "written"),
         ("read", "read"), ("train", "trained"))
GROUP_HOPS = ("issued", "taken", "loaded", "started", "generated", "scored", "written")


def group_hops(entry_id: str, group: Group, read_at: float) -> dict[str, float]:
    """One group's hop times: what its actor recorded, when the stream stored it, when it was read."""
    return {**group.trace, "written": entry_time(entry_id), "read_at": read_at,
            "tokens": float(sum(r.length for r in group.responses))}


@dataclass
class StepTimes:
    """What the learner knows of one step's round trip (unix seconds; NaN = unknown)."""

    anchor: float                    # publish of the anchor version started (unknown: the step's start)
    published: float                 # ... and was in the buffer (NaN when this learner did not publish it)
    read: float                      # D_R valid groups read
    trained: float                   # the step's last update done
    groups: list[dict[str, float]] = field(default_factory=list)   # group_hops of the step's groups


def path_metrics(t: StepTimes) -> dict[str, float]:
    """The ``path/*`` metrics of the module docstring."""
    out: dict[str, float] = {}

    def rel(x: float) -> float:
        return x - t.anchor

    last = {"published": t.published, "read": t.read, "trained": t.trained}
    for hop in GROUP_HOPS:
        times = [g[hop] for g in t.groups if g.get(hop, 0.0) > 0.0]
        if times:
            out[f"path/{hop}_first"] = rel(min(times))
            out[f"path/{hop}_last"] = rel(max(times))
            last[hop] = max(times)
    for hop in ("published", "read", "trained"):
        if math.isfinite(last[hop]):
            out[f"path/{hop}"] = rel(last[hop])
    reached = t.anchor
    for segment, hop in CHAIN:
        at = last.get(hop, math.nan)
        if not math.isfinite(at):
            continue                               # a hop nobody recorded adds no segment
        out[f"path/seg/{segment}"] = max(at - reached, 0.0)
        reached = max(reached, at)
    start = t.published if math.isfinite(t.published) else t.anchor
    out["path/gen_phase"] = t.read - start
    out["path/groups"] = float(len(t.groups))
    out["path/tokens"] = float(sum(g.get("tokens", 0.0) for g in t.groups))
    return out


def hop_shares(rows: list[dict]) -> dict[str, float]:
    """Each segment's median share of the step's critical path (``path/seg/<hop>`` / ``path/trained``)
    over the metrics rows that have a trace."""
    traced = [r for r in rows if float(r.get("path/trained", 0.0)) > 0]
    if not traced:
        return {}
    return {seg: statistics.median(float(r.get(f"path/seg/{seg}", 0.0)) / float(r["path/trained"]) for r in traced)
            for seg, _ in CHAIN}
