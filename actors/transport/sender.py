"""The collective transport on the learner: rank 0 forms the group and broadcasts; every rank gathers.

One *attempt* sends the published version to a set of members:

1. members: registered actors whose latest incarnation heartbeat recently, minus those evicted
   during this version (a catch-up sends only to the members that lack the version);
2. a new generation when the members changed or the last attempt failed (a new roster: each
   member's rank offset and worker count);
3. ``send`` on the hub names the members; each sets ``ready`` at its next poll. The wait ends
   at ``join_timeout_s``, or earlier once every missing member's heartbeat is stale;
4. ``decision``: ``abort`` if anyone is missing (they are evicted and named), else ``go``;
5. the group's set-up (a new generation), the header, then the buckets (``channel.send_bucket``),
   each wait watching the members' heartbeats: a member counts as dead once its loop's heartbeat
   and one of its engine ranks' (each worker beats for itself while it waits in a transfer) are
   older than ``stale_after_s``, so one that dies after "go" is named then, not at
   ``collective_timeout_s``. Every learner rank walks the same bucket plan (under ZeRO-3 each
   bucket is gathered on every rank); after a failure rank 0 keeps walking without sending, so
   the DeepSpeed group never deadlocks;
6. ``done`` from every member, else the ones that did not answer (dead or hung) are named.

A failed attempt asks the coordinator for another (``retry``) with the survivors; the version
fails for good after ``max_attempts`` (``WeightTransferError``). Nothing here waits without a
deadline: hub waits are bounded by ``join_timeout_s``, the group's construction and every
broadcast by ``collective_timeout_s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from actors.transport.config import CollectiveConfig
from actors.transport import WeightSource, WeightTransferError
from actors.transport.channel import (
    Channel,
    open_channel,
    plan_buckets,
    plan_id,
    plan_to_json,
    resolve_backend,
    send_bucket,
)
from actors.transport.hub import Hub, Registration
from actors.transport.vllm_engine import header_tensor

MB = 1 << 20
REPORT_GRACE_S = 2.0      # after a failed broadcast: how long members get to say done / failed


@dataclass
class _Group:
    gen: int
    members: list[Registration]
    offsets: dict[str, int]                  # actor -> its first rank (rank 0 is the learner)
    world: int
    channel: Channel | None = None

    def describe(self) -> str:
        return ", ".join(f"{m.actor} (rank {self.offsets[m.actor]})" for m in self.members) or "nobody"


@dataclass
class Outcome:
    """What one attempt did; the coordinator logs ``events`` and asks again while ``retry``."""

    retry: bool = False
    events: list[str] = field(default_factory=list)
    errors: int = 0
    groups_formed: int = 0
    members: int = 0
    bytes: int = 0
    seconds: float = 0.0
    ready_s: float = 0.0        # announce -> every member ready
    broadcast_s: float = 0.0    # header + buckets (ZeRO-3: with the gathers)
    done_s: float = 0.0         # last bucket -> every member loaded

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class _Walked:
    """A WeightSource that notes (in ``walked``) that its buckets were iterated."""

    def __init__(self, source: WeightSource, walked: list):
        self.source, self.walked = source, walked
        self.rank, self.collective = source.rank, source.collective

    def metadata(self):
        return self.source.metadata()

    def buckets(self, plan):
        self.walked.append(True)
        return self.source.buckets(plan)


def bucket_bytes(cfg: CollectiveConfig, device: str) -> int:
    """The bucket budget; every learner rank must compute the same one (ZeRO-3 lockstep)."""
    backend = resolve_backend(cfg.backend, "cuda" if device == "cuda" else "cpu")
    return (cfg.bucket_mb or (256 if backend == "nccl" else 64)) * MB


def drain(source: WeightSource, plan) -> None:
    """Walk the plan without sending: keeps ZeRO-3 gathers in step with the other ranks."""
    if source.collective:
        for _ in source.buckets(plan):
            pass
    elif isinstance(source, _Walked):
        source.walked.append(True)


class CollectiveSender:
    """Learner rank 0: owns the hub, the generations and the broadcasts."""

    def __init__(self, cfg: CollectiveConfig, host: str, device: str):
        self.cfg = cfg
        self.device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.backend = resolve_backend(cfg.backend, self.device)
        self.bucket_bytes = bucket_bytes(cfg, device)
        self.hub = Hub.serve(host, cfg.collective_timeout_s)
        self.group: _Group | None = None
        self.gen = self.seq = 0
        self.version: int | None = None        # the published version
        self.failures = 0                      # failed attempts of this version
        self.evicted: set[tuple[str, str]] = set()
        self.delivered: dict[str, tuple[str, int]] = {}   # actor -> (incarnation, version it holds)
        self._plans: set[str] = set()
        self._sent: dict[int, list[str]] = {}      # seq -> its members (to delete their keys later)
        self._last_members: list[Registration] = []   # of the last group formed
        self._seen: dict[str, str] = {}             # actor -> the incarnation last in a group

    def location(self, version: int) -> str:
        return f"collective://{self.hub.address}/{version}"

    def published(self, version: int) -> None:
        self.version, self.failures = version, 0
        self.evicted.clear()                   # a member skipped last version gets another chance

    # ---- membership
    def _live(self) -> list[Registration]:
        """Registered members whose loop beat recently, or every engine rank of which did (it is still
        receiving: e.g. leaving a set-up this learner gave up on)."""
        return [r for r in self.hub.registrations() if not self._silent_workers(r)]

    def lacking(self) -> list[Registration]:
        """Live members that do not hold the published version: restarted or added actors, and
        members evicted from its send while alive (busy). A catch-up sends to these."""
        return [r for r in self._live() if self.delivered.get(r.actor) != (r.inc, self.version)]

    def status(self) -> dict:
        return {"live": [r.actor for r in self._live()], "pending": self.version is not None and bool(self.lacking()),
                "gen": self.gen, "backend": self.backend}

    def _changes(self, members: list[Registration], catch_up: bool) -> str:
        """Why the membership differs from the last group's: who joined, restarted, rejoined or left."""
        if not self._last_members:
            return ""
        last = {(m.actor, m.inc) for m in self._last_members}
        notes = []
        for m in members:
            if (m.actor, m.inc) in last:
                continue
            seen = self._seen.get(m.actor)
            notes.append(f"{m.actor} {'joined' if seen is None else 'restarted' if seen != m.inc else 'rejoined'}")
        if not catch_up:            # a catch-up group holds only the members that lack the version
            notes += [f"{a} left" for a in sorted({m.actor for m in self._last_members} - {m.actor for m in members})]
        return "; " + ", ".join(notes) if notes else ""

    def _form(self, members: list[Registration]) -> _Group:
        if self.group is not None and self.group.channel is not None:
            self.group.channel.close()
        self.gen += 1
        offsets, rank = {}, 1
        for m in members:
            offsets[m.actor] = rank
            rank += m.workers
        self.group = _Group(self.gen, members, offsets, rank)
        return self.group

    def _stale(self, actor: str, inc: str) -> bool:
        """Dead for the hub: no heartbeat within stale_after_s, or a newer incarnation registered."""
        b = self.hub.get_json(f"beat/{actor}")
        return b is None or b["inc"] != inc or time.time() - float(b["t"]) > self.cfg.stale_after_s

    def _silent_workers(self, m: Registration) -> list[int]:
        """During a send: the member's engine ranks that went silent, when its loop did too ([] = alive).
        The loop is blocked in the engine while it receives, and each engine rank beats for itself
        then, so a dead worker is found whatever its siblings do."""
        if not self._stale(m.actor, m.inc):
            return []
        return self.hub.stale_workers(m.actor, m.inc, m.workers, self.cfg.stale_after_s)

    # ---- one attempt
    def send(self, source: WeightSource, catch_up: bool = False) -> Outcome:
        """One attempt to deliver the published version (module docstring); every rank walks the plan,
        also when this one fails on the way (the other ranks' gathers must not wait forever)."""
        plan = plan_buckets(source.metadata(), self.bucket_bytes)
        walked = []
        tracked = _Walked(source, walked)
        try:
            return self._send(tracked, plan, catch_up)
        finally:
            if not walked:
                drain(source, plan)

    def _send(self, source: WeightSource, plan, catch_up: bool) -> Outcome:
        t0, out = time.monotonic(), Outcome()
        members = self.lacking() if catch_up else [r for r in self._live() if (r.actor, r.inc) not in self.evicted]
        members.sort(key=lambda r: r.actor)      # ranks by name: a restart does not reshuffle them
        if self.version is None or not members:
            drain(source, plan)
            return out
        g = self.group
        if g is None or [(m.actor, m.inc) for m in g.members] != [(m.actor, m.inc) for m in members]:
            changes = self._changes(members, catch_up)
            g = self._form(members)
            self._last_members = list(members)
            self._seen.update({m.actor: m.inc for m in members})
            out.groups_formed += 1
            out.events.append(f"version {self.version}: group {g.gen} formed with {g.describe()} "
                              f"({self.backend}, {len(plan)} buckets{changes})" + (" [catch-up]" if catch_up else ""))
        out.members = len(members)
        t = time.monotonic()
        error = self._handshake(g, plan)
        out.ready_s, t = time.monotonic() - t, time.monotonic()
        if error is None:
            error, out.bytes = self._broadcast(g, source, plan)
        else:
            drain(source, plan)
        out.broadcast_s, t = time.monotonic() - t, time.monotonic()
        if error is None:
            error = self._collect_done(g)
            out.done_s = time.monotonic() - t
        if error is not None:
            self._failed(g, error, out, catch_up)
        else:
            for m in g.members:
                self.delivered[m.actor] = (m.inc, self.version)
        self._forget()
        out.seconds = time.monotonic() - t0
        return out

    def _keys(self, seq: int, what: str, members: list[Registration]) -> list[str]:
        return [f"s{seq}/{what}/{m.actor}" for m in members]

    def _error(self, g: _Group, what: str, actors: list[str], detail: str = "",
               workers: dict[str, list[int]] | None = None) -> WeightTransferError:
        """An error naming ``actors`` (and their silent engine ranks, ``workers``) the way an operator
        reads them; ``.actors`` keeps the ids."""
        incs = {m.actor: m.inc for m in g.members}
        error = WeightTransferError(f"version {self.version}, group {g.gen}: {what}",
                                    [self.hub.describe(a, g.offsets.get(a), (workers or {}).get(a), incs.get(a))
                                     for a in actors], detail)
        error.actors = actors
        return error

    def _handshake(self, g: _Group, plan) -> WeightTransferError | None:
        """Announce the send, wait for every member's ``ready``, then ``go`` (or ``abort``)."""
        pid = plan_id(plan)
        if pid not in self._plans:
            self.hub.set_json(f"plan/{pid}", plan_to_json(plan))
            self._plans.add(pid)
        self.seq += 1
        self._sent[self.seq] = [m.actor for m in g.members]
        self.hub.set_json("send", {
            "seq": self.seq, "version": self.version, "gen": g.gen, "world": g.world, "backend": self.backend,
            "plan": pid, "timeout_s": self.cfg.collective_timeout_s,
            "members": [[m.actor, m.inc, g.offsets[m.actor], m.workers] for m in g.members]})
        by_actor = {m.actor: m for m in g.members}
        missing = self.hub.wait_keys(
            self._keys(self.seq, "ready", g.members), self.cfg.join_timeout_s,
            give_up=lambda keys: all(self._silent_workers(by_actor[k.rsplit("/", 1)[1]]) for k in keys))
        if missing:
            self.hub.store.set(f"s{self.seq}/decision", "abort")
            return self._error(g, f"not ready within {self.cfg.join_timeout_s:.0f} s",
                               [k.rsplit("/", 1)[1] for k in missing])
        self.hub.store.set(f"s{self.seq}/decision", "go")
        return None

    def _broadcast(self, g: _Group, source: WeightSource, plan) -> tuple[Exception | None, int]:
        """Header and buckets; after a failure the plan is still walked to the end (ZeRO-3)."""
        error, sent = None, 0
        watch = self._watch(g)
        try:
            if g.channel is None:
                # its own store connection: a set-up given up on leaves its rendezvous blocked on it
                store = Hub.connect(self.hub.host, self.hub.port, self.cfg.collective_timeout_s).store
                g.channel = open_channel(self.backend, store, g.gen, 0, g.world, self.cfg.collective_timeout_s,
                                         self.device, tick=watch)
            g.channel.start(header_tensor(self.seq, self.version, g.gen, len(plan), g.channel.device)).wait(watch)
        except Exception as exc:
            error = exc
        for bucket, tensors in zip(plan, source.buckets(plan)):
            if error is None:
                try:
                    sent += send_bucket(g.channel, bucket, tensors, watch)
                except Exception as exc:
                    error = exc
        return error, sent

    def _watch(self, g: _Group):
        """While the set-up, the header or a bucket waits: a member whose loop and one of whose engine
        ranks went silent is dead, and the wait would otherwise last to its timeout (a dead NCCL
        peer fails nothing; a gloo peer that never joins the group leaves the set-up waiting)."""
        def tick() -> None:
            silent = {m.actor: w for m in g.members if (w := self._silent_workers(m))}
            if silent:
                raise self._error(g, "broadcast stalled", list(silent),
                                  f"no heartbeat for {self.cfg.stale_after_s:.0f} s", workers=silent)
        return tick

    def _collect_done(self, g: _Group) -> WeightTransferError | None:
        missing = self.hub.wait_keys(self._keys(self.seq, "done", g.members), self.cfg.join_timeout_s)
        if not missing:
            return None
        names = [k.rsplit("/", 1)[1] for k in missing]
        return self._error(g, "not loaded", names, self._reports(names).removeprefix("; "))

    def _failed(self, g: _Group, error: Exception, out: Outcome, catch_up: bool) -> None:
        """Name who is missing, evict them for this version, drop the group, ask for a retry."""
        self.hub.store.set(f"s{self.seq}/abort", "1")   # NCCL members blocked in a receive stop at their next tick
        if g.channel is not None:
            g.channel.close()         # gloo members blocked in this group's broadcast fail at once
        self.group = None
        if not isinstance(error, WeightTransferError):
            # Who is gone? The members that say neither done nor failed within a grace period.
            keys = self._keys(self.seq, "done", g.members) + self._keys(self.seq, "failed", g.members)
            self.hub.wait_keys(keys, REPORT_GRACE_S)
            silent = [m.actor for m in g.members if not self.hub.has(f"s{self.seq}/done/{m.actor}")
                      and not self.hub.has(f"s{self.seq}/failed/{m.actor}")]
            error = self._error(g, "broadcast failed", silent, f"{type(error).__name__}: {str(error)[:200]}"
                                + self._reports([m.actor for m in g.members]))
        out.errors += 1
        out.events.append(str(error))
        if catch_up:
            return                    # the next upkeep tick tries again, with whoever still lacks it
        self.evicted |= {(m.actor, m.inc) for m in g.members if m.actor in error.actors}
        self.failures += 1
        if self.failures >= self.cfg.max_attempts:
            raise WeightTransferError(f"version {self.version}: {self.failures} attempts failed; last: {error}")
        out.retry = True

    def _reports(self, actors: list[str]) -> str:
        """The receive errors members reported for the current send."""
        found = [f"{a}: {self.hub.get_json(f's{self.seq}/failed/{a}')}" for a in actors
                 if self.hub.has(f"s{self.seq}/failed/{a}")]
        return ("; reported: " + "; ".join(found))[:1000] if found else ""

    def _forget(self) -> None:
        """Drop the keys of sends older than the last two (the hub would otherwise grow every version);
        a member still reading an old send finds no decision and waits for the current one."""
        for seq in [s for s in self._sent if s < self.seq - 1]:
            actors = self._sent.pop(seq)
            keys = [f"s{seq}/{w}/{a}" for w in ("ready", "done", "failed") for a in actors]
            self.hub.delete([f"s{seq}/decision", f"s{seq}/abort", *keys])
