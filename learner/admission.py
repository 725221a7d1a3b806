"""Which groups a learner step trains: collect, admit, drop stale, ACK (DESIGN.md §3, §4).

:meth:`Admission.collect` reads groups until D_R valid ones are in hand (pending groups of a
previous incarnation first) and classifies each group it reads:

* already trained (in the restored weights, or trained and waiting for its checkpoint's ACK):
  skipped, never trained twice;
* sampled by a version ahead of the learner: after a restore, the crashed learner had published
  it, so the group waits until the retrained updates reach that version; a version nobody
  published is corrupt and dead-lettered;
* stale: strict on-policy drops a group left over from an earlier step's dynamic sampling,
  drops responses that straddle a weight update (sampled by two versions), and raises
  ``PolicyLagError`` on any other lag; off-policy drops responses whose lag exceeds
  ``max_lag`` (dead letter ``stale``, counted) and trains the rest of the group;
* fixed lag k >= 1 (``--learner.lag fixed:k``): a response is trained only at lag exactly k (less in the
  ramp-in, ``buffer.versions.fixed_lag_required``). A group of a later step (lag < k: generation
  runs k steps ahead) waits in memory, un-ACKed, until the learner reaches version_start + k;
  responses staler than k (a top-up's surplus) and straddling ones are dropped as stale;
* zero advantage (all rewards equal): ACKed and discarded under dynamic sampling;
* PRIME (``cfg.prime``): instead of the zero-advantage rule, the online prompt filter: a group
  whose accuracy over its present responses lies outside [filter_low, filter_high] is ACKed
  'filtered' and counted (``prompts/filtered_frac``); its token advantages come later, from the
  PRM (``learner.prime_step``);
* valid: its advantages and loss mask go to the step.

Groups that are trained are ACKed later, once a checkpoint covers them (:class:`TrainedLedger`).

Off-policy, the next step's batch is generated while a step trains. :meth:`Admission.look_ahead`
(called by the learner between its waits on the ranks) takes those groups as they are written,
into the backlog, un-ACKed: the next :meth:`~Admission.collect` admits them as above. It only
*predicts* which ones that admission will not use (every response staler than max_lag, or zero
advantage under dynamic sampling) and reports them to the feeder at once, so their replacements
are generated with the rest of the batch instead of in a second round after training
(``bench/async_vs_sync.py``). A wrong guess costs a surplus prompt or a later replacement, never
a group: nothing is ACKed ahead.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from buffer.codec import encode_group
from buffer.messages import Group
from buffer.versions import group_lags
from learner.advantages import AdvantageResult, compute_advantages
from learner.errors import PolicyLagError, StepInterrupted
from learner.modes import StepMode
from learner.prime import group_accuracy, outcome_labels, prompt_filter
from learner.step_path import group_hops
from learner.trainer_config import LearnerConfig

Entry = tuple[str, Group]          # (stream entry id, group)


@dataclass
class Collected:
    """The valid groups of one step plus what was dropped on the way."""

    entries: list[Entry] = field(default_factory=list)
    advantages: list[np.ndarray] = field(default_factory=list)   # per group (N,)
    loss_masks: list[np.ndarray] = field(default_factory=list)   # per group (N,) bool
    seen: list[tuple[Group, np.ndarray]] = field(default_factory=list)  # non-stale groups read, present mask
    read: int = 0
    zero_dropped: int = 0
    stale_responses: int = 0
    stale_groups: int = 0
    skipped_done: int = 0
    filtered: int | None = None      # groups outside PRIME's accuracy band (None: no prompt filter)
    lost: int = 0                    # groups read for this step and not usable (the feeder replaces them)
    hops: list[dict[str, float]] = field(default_factory=list)   # learner.step_path.group_hops of each seen group
    done_at: float = 0.0             # unix time the step had its D_R valid groups
    read_ahead: int = 0              # groups taken while the step before trained (Admission.look_ahead)

    def metrics(self) -> dict[str, float]:
        out = {"groups/read": self.read, "groups/trained": len(self.entries),
               "groups/zero_adv_dropped": self.zero_dropped, "groups/stale_dropped": self.stale_groups,
               "groups/skipped_done": self.skipped_done, "groups/read_ahead": self.read_ahead,
               "lag/stale_dropped": float(self.stale_responses)}
        if self.filtered is not None:
            judged = self.filtered + len(self.entries)
            out |= {"groups/filtered": self.filtered,
                    "prompts/filtered_frac": self.filtered / judged if judged else 0.0}
        return out


class TrainedLedger:
    """Group ids in the weights, and the trained entries whose ACK waits for a checkpoint.

    A group delivered again (Redis lost an ACK, or a delivery past its fsync window) is never
    trained twice: its id is in the restored checkpoint's last groups or was trained here.
    """

    def __init__(self, buffer):
        self.buffer = buffer
        self.in_weights: set[str] = set()
        self.unacked: list[tuple[str, str]] = []     # (entry id, group id)

    def restore(self, group_ids: list[str]) -> None:
        self.in_weights = set(group_ids)

    def trained(self, entries: list[Entry]) -> None:
        self.unacked.extend((e, g.group_id) for e, g in entries)
        self.in_weights.update(g.group_id for _, g in entries)

    def pending_ids(self) -> list[str]:
        """Trained group ids a checkpoint must record (they are ACKed once it is committed)."""
        return [g for _, g in self.unacked]

    def ack_trained(self) -> None:
        ack(self.buffer, self.unacked, "trained")
        self.unacked = []


def ack(buffer, entries: list[tuple[str, str]], outcome: str) -> None:
    """ACK (entry id, group id) pairs with the consumer's outcome (the audit's books)."""
    if entries:
        buffer.ack_groups([e for e, _ in entries], [g for _, g in entries], outcome)


@dataclass
class _LookAhead:
    """What :meth:`Admission.look_ahead` took for one step: groups it expects the step to train or lose."""

    step: int
    valid: int = 0
    lost: int = 0


class Admission:
    """Reads and classifies the groups of the learner's steps (module docstring)."""

    def __init__(self, cfg: LearnerConfig, buffer, ledger: TrainedLedger, on_wait: Callable[[], None] | None = None):
        """``on_wait()`` runs between reads while a step waits for data (the weight transport's upkeep)."""
        self.cfg, self.buffer, self.ledger = cfg, buffer, ledger
        self.on_wait = on_wait
        self._backlog: deque[Entry] = deque(buffer.pending_groups(cfg.consumer))
        # (version the learner must reach, entry): sampled by a version it has not reached yet, or
        # (fixed lag) for a later step; released into the backlog at the start of a step
        self._deferred: list[tuple[int, Entry]] = []
        self._look: _LookAhead | None = None
        # the look-ahead's advantages, by (group id, present responses): collect admits the same group
        # with the same responses present (the version it predicted at), so it need not compute them again
        self._predicted: dict[tuple[str, bytes], AdvantageResult] = {}
        self._collected: dict | None = None    # the last collected step's {"step", "lost"}, for the feeder's rate

    def collect(self, version: int, step: int, mode: StepMode,
                should_stop: Callable[[], bool] | None = None) -> Collected:
        """D_R valid groups for ``step`` at learner ``version`` under ``mode`` (blocks; ``data_timeout_s``
        bounds it). ``should_stop()`` is asked after every read that found nothing: True raises
        StepInterrupted, with the groups already admitted put back first in line (still pending)."""
        cfg, col = self.cfg, Collected(filtered=None if self.cfg.prime is None else 0)
        need = cfg.batch.rollout_batch
        if self._look is not None and self._look.step == step:
            col.read_ahead = self._look.valid + self._look.lost
        self._look = None
        self._release_deferred(version)
        deadline = None if cfg.data_timeout_s is None else time.monotonic() + cfg.data_timeout_s
        while len(col.entries) < need:
            got = self._read(need - len(col.entries))
            read_at, lost = time.time(), col.lost
            for entry_id, group in got:
                col.read += 1
                before = (len(col.seen), len(col.entries), len(self._deferred), col.skipped_done)
                self._admit(entry_id, group, col, version, step, mode)
                if len(col.seen) > before[0]:    # this step's group (not a stale one): its hops
                    col.hops.append(group_hops(entry_id, group, read_at))
                unused = (len(col.entries), len(self._deferred), col.skipped_done) == before[1:]
                if unused and (group.step >= step or not (mode.strict or mode.pinned)):
                    col.lost += 1                # the feeder replaces it (the step's own, in a per-step mode)
            if self.on_wait is not None:
                self.on_wait()
            if col.lost > lost:
                self._publish_need(step, need - len(col.entries), col.lost)
            if not got:
                self._publish_need(step, need - len(col.entries), col.lost)
                if should_stop is not None and should_stop():
                    self._backlog.extendleft(reversed(col.entries))
                    raise StepInterrupted(f"step {step}: stopped while waiting for data "
                                          f"({len(col.entries)}/{need} valid groups)")
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"step {step}: {len(col.entries)}/{need} valid groups after "
                                       f"{cfg.data_timeout_s}s ({col.read} read)")
        col.done_at = time.time()
        self._collected = {"step": step, "lost": col.lost}
        self._publish_need(step, 0, col.lost)
        return col

    def look_ahead(self, step: int, version: int, mode: StepMode) -> None:
        """Off-policy, while the step before ``step`` trains: take ``step``'s groups already written (up to
        the D_R it is expected to train) into the backlog, and report at once those its admission at
        ``version`` is expected to lose (module docstring). Never blocks; per-step modes (strict
        on-policy, fixed lag) and PRIME's filter are left to :meth:`collect`."""
        if mode.strict or mode.pinned or self.cfg.prime is not None:
            return
        if self._look is None or self._look.step != step:
            self._look = _LookAhead(step)
            self._predicted.clear()          # an earlier step's: used by now, or computed again
        ahead, need, lost = self._look, self.cfg.batch.rollout_batch, self._look.lost
        while ahead.valid < need:
            got = self.buffer.take_groups(self.cfg.consumer, need - ahead.valid, 0)
            if not got:
                break
            self._backlog.extend(got)
            for _, g in got:
                if self._expect_lost(g, version, mode):
                    ahead.lost += 1
                else:
                    ahead.valid += 1
        if ahead.lost > lost:
            self._publish_need(step, need - ahead.valid, ahead.lost)

    def _expect_lost(self, g: Group, version: int, mode: StepMode) -> bool:
        """Whether an off-policy admission at ``version`` reads ``g`` and cannot use it (every response
        staler than max_lag; zero advantage under dynamic sampling). Trained and future groups are not
        losses there either."""
        lag = group_lags(g, version)
        if g.group_id in self.ledger.in_weights or (lag < 0).any():
            return False
        present = lag <= mode.max_lag
        if not present.any():
            return True
        if not self.cfg.dynamic_sampling:
            return False
        res = self._predicted[(g.group_id, present.tobytes())] = self._advantages(g, present, self.cfg.advantage)
        return bool(res.zero_groups[0])

    def _release_deferred(self, version: int) -> None:
        ready = [entry for at, entry in self._deferred if at <= version]
        self._deferred = [(at, entry) for at, entry in self._deferred if at > version]
        self._backlog = deque(ready + list(self._backlog))

    def _read(self, need: int) -> list[Entry]:
        if self._backlog:
            return [self._backlog.popleft() for _ in range(min(need, len(self._backlog)))]
        return self.buffer.take_groups(self.cfg.consumer, need, self.cfg.block_ms)

    def _publish_need(self, step: int, groups: int, lost: int) -> None:
        """Tell the feeder how many valid groups this step still lacks and how many it read and could
        not use (``learner_need`` in the run's meta hash, with a wake-up: ``RunBuffer.announce_meta``):
        the feeder replaces each lost group at once (``launch.run.feeder``). Re-published on every empty
        read: for a shortfall nobody reported lost, the feeder trusts only a hint newer than its last answer.
        ``collected``, the last collected step's final count, sets the feeder's rejection rate: a look ahead
        may overwrite that step's own last need before the feeder has read it."""
        self.buffer.announce_meta(learner_need={"step": step, "groups": groups, "lost": lost, "time": time.time(),
                                                "collected": self._collected})

    def _admit(self, entry_id: str, g: Group, col: Collected, version: int, step: int, mode: StepMode) -> None:
        if self._already_trained(entry_id, g, col):
            return
        lag = group_lags(g, version)                                                # (N,)
        if (lag < 0).any():
            self._ahead(entry_id, g, version)
            return
        if mode.pinned:
            present = self._fixed_lag(entry_id, g, lag, col, version, mode)
        else:
            present = self._present(entry_id, g, lag, col, step, version, mode)
        if present is not None and (mode.strict or mode.pinned):
            present = self._one_version_only(entry_id, g, col, present)
        if present is None:
            return
        col.seen.append((g, present))
        self._score(entry_id, g, present, col)

    def _already_trained(self, entry_id: str, g: Group, col: Collected) -> bool:
        unacked = {gid: e for e, gid in self.ledger.unacked} | {x.group_id: e for e, x in col.entries}
        if g.group_id not in self.ledger.in_weights and g.group_id not in unacked:
            return False
        col.skipped_done += 1
        if unacked.get(g.group_id) != entry_id:       # else the next checkpoint ACKs this entry
            ack(self.buffer, [(entry_id, g.group_id)], "already_trained")
        return True

    def _ahead(self, entry_id: str, g: Group, version: int) -> None:
        newest = max(r.version_start for r in g.responses)
        if newest <= self.buffer.get_version()[0]:
            # after a restore: sampled with weights the crashed learner had published; the
            # retrained updates reach that version again, then the group is used
            self._deferred.append((newest, (entry_id, g)))
            return
        # a version nobody published: corrupt, never trainable
        self.buffer.dead_letter("learner", "future_version", raw=encode_group(g), detail=(
            f"group {g.group_id}: version_start {newest} > published and learner version {version}"))
        ack(self.buffer, [(entry_id, g.group_id)], "stale")

    def _present(self, entry_id: str, g: Group, lag: np.ndarray, col: Collected, step: int,
                 version: int, mode: StepMode) -> np.ndarray | None:
        """The responses fresh enough to train (None: the whole group is dropped, ACKed 'stale')."""
        if mode.strict and not mode.guard_fallback:
            if not lag.any():
                return np.ones(len(lag), dtype=bool)
            if g.step >= step:
                raise PolicyLagError(f"strict on-policy: group {g.group_id} has response lags {lag.tolist()} "
                                     f"at learner version {version} (every token must be lag 0)")
            # Surplus of an earlier step's dynamic sampling: generated on-policy for its own step,
            # finished after that step was complete. Strict mode never trains it at lag > 0.
            col.stale_groups += 1
            col.stale_responses += len(lag)
            # stale dead letters record the decision, not a copy: the group stays in the groups
            # stream (retention), and stale groups can be a large share of an off-policy run
            self.buffer.dead_letter("learner", "stale", detail=(
                f"group {g.group_id} of step {g.step} arrived at step {step} (lags "
                f"{sorted(set(lag.tolist()))}); strict on-policy trains only lag 0"))
            ack(self.buffer, [(entry_id, g.group_id)], "stale")
            return None
        present = lag <= mode.max_lag       # the guard's fallback: max_lag 0, stale data dropped
        if present.all():
            return present
        return self._drop_stale(entry_id, g, present, int((~present).sum()), col, (
            f"group {g.group_id}: {int((~present).sum())}/{len(lag)} responses with lag > max_lag {mode.max_lag} "
            f"at version {version} (lags {sorted(set(lag.tolist()))})"))

    def _fixed_lag(self, entry_id: str, g: Group, lag: np.ndarray, col: Collected, version: int,
                   mode: StepMode) -> np.ndarray | None:
        """Fixed lag: the responses at exactly the required lag (None: the group waits for a later
        version, or nothing is left and it is ACKed 'stale')."""
        required = mode.required_lag(version)
        if (lag < required).any():
            # generated for a later step (pinned k versions behind it): train it once it is k behind
            newest = max(r.version_start for r in g.responses)
            self._deferred.append((newest + mode.fixed_lag, (entry_id, g)))
            return None
        fresh = lag == required
        if fresh.all():
            return fresh
        return self._drop_stale(entry_id, g, fresh, int((~fresh).sum()), col, (
            f"group {g.group_id}: {int((~fresh).sum())}/{len(lag)} responses at lags "
            f"{sorted(set(lag[~fresh].tolist()))} > the fixed lag {required} at version {version}"))

    def _drop_stale(self, entry_id: str, g: Group, keep: np.ndarray, dropped: int, col: Collected,
                    why: str) -> np.ndarray | None:
        """``dropped`` responses left out of ``keep`` (N,) bool as stale: counted and dead-lettered with
        ``why``; the rest of the group is trained (None: nothing left, the group is ACKed 'stale')."""
        col.stale_responses += dropped
        self.buffer.dead_letter("learner", "stale", detail=(
            f"{why}; " + ("trained on the rest" if keep.any() else "group dropped")))
        if keep.any():
            return keep
        col.stale_groups += 1
        ack(self.buffer, [(entry_id, g.group_id)], "stale")
        return None

    def _one_version_only(self, entry_id: str, g: Group, col: Collected, present: np.ndarray) -> np.ndarray | None:
        """Strict on-policy and fixed lag train no response whose weights changed while it was sampled
        (version_end != version_start): those are dropped and dead-lettered as stale, the rest of
        the group is trained (None: nothing left, the group is ACKed 'stale')."""
        straddled = present & np.array([r.version_end != r.version_start for r in g.responses])    # (N,)
        if not straddled.any():
            return present
        n = int(straddled.sum())
        spans = sorted({(r.version_start, r.version_end) for r, s in zip(g.responses, straddled) if s})
        return self._drop_stale(entry_id, g, present & ~straddled, n, col, (
            f"group {g.group_id}: {n}/{len(straddled)} responses straddle a weight update (versions "
            f"{', '.join(f'{a}->{b}' for a, b in spans)}); this mode trains only responses sampled by "
            "one version"))

    def _score(self, entry_id: str, g: Group, present: np.ndarray, col: Collected) -> None:
        """Advantages of a fresh group; zero-advantage groups are discarded or masked."""
        cfg = self.cfg
        if cfg.prime is not None:
            self._filter_prime(entry_id, g, present, col)
            return
        res = self._predicted.pop((g.group_id, present.tobytes()), None) or self._advantages(g, present, cfg.advantage)
        zero = bool(res.zero_groups[0])
        if zero and cfg.dynamic_sampling:
            col.zero_dropped += 1
            ack(self.buffer, [(entry_id, g.group_id)], "filtered")
            return
        mask = res.loss_mask[0].numpy() & (not zero or not cfg.advantage.reject_zero_advantage)
        col.zero_dropped += int(zero and cfg.advantage.reject_zero_advantage)
        col.entries.append((entry_id, g))
        col.advantages.append(res.advantages[0].numpy())
        col.loss_masks.append(mask)

    def _advantages(self, g: Group, present: np.ndarray, adv_cfg):
        return compute_advantages(
            torch.tensor(g.rewards)[None], torch.tensor([r.length for r in g.responses])[None],
            torch.tensor([r.truncated for r in g.responses])[None], adv_cfg,
            max_len=g.max_tokens or None, present=torch.from_numpy(present)[None])

    def _filter_prime(self, entry_id: str, g: Group, present: np.ndarray, col: Collected) -> None:
        """PRIME's online prompt filter (Cui et al. 2025): keep the group iff its accuracy over the
        present responses lies in the band; kept groups get their loss mask (truncation masks) here
        and their token advantages from the PRM once the step's batch is complete."""
        prime = self.cfg.prime
        correct = outcome_labels(torch.tensor(g.rewards, dtype=torch.float64))[None]           # (1, N)
        accuracy = group_accuracy(correct, torch.from_numpy(present)[None])                    # (1,)
        if not bool(prompt_filter(accuracy, prime.filter_low, prime.filter_high)[0]):
            col.filtered += 1
            ack(self.buffer, [(entry_id, g.group_id)], "filtered")
            return
        # zero outcome advantage is no reason to drop a group here: its process rewards still differ
        res = self._advantages(g, present, self.cfg.advantage.model_copy(update={"reject_zero_advantage": False}))
        col.entries.append((entry_id, g))
        col.advantages.append(np.zeros(len(g.responses), dtype=np.float32))   # per token, from the PRM
        col.loss_masks.append(res.loss_mask[0].numpy())
