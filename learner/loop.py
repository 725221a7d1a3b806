"""The learner coordinator: buffer -> advantages -> N_SGD DeepSpeed updates -> weights, metrics.

One ``Learner.step()`` (step s, starting at policy version v0 = s * N_SGD when nothing was
skipped):

1. collect D_R valid groups from the buffer (pending groups of a previous incarnation first):
   strict on-policy raises ``PolicyLagError`` on any lag != 0; off-policy drops responses
   whose lag v0 - version_start exceeds max_lag (dead-letter ``stale``); zero-advantage
   groups are ACKed and discarded (dynamic sampling) until D_R valid groups are in hand;
   a group sampled with a version ahead of the learner (possible only after a restore) waits
   until the learner gets there, one with a version never published is dead-lettered;
2. GRPO advantages per group (``learner.advantages``), rows of the responses in the loss,
   optional pi_old recompute / reference log-probs (no grad, split over ranks);
3. the mini-batch schedule (``learner.schedule``): update u of the step runs at version v0 + u,
   so reuse adds lag 0..N_SGD-1 on top of the actors' lag; each mini-batch is split into
   token-budget micro-batches dealt evenly to the ranks (``learner.batching``);
4. weights are published every ``sync_interval`` updates and after the step's last update:
   transport.publish on rank 0, then ``buffer.publish_version``;
5. entropy controller update;
6. every ``checkpoint_every`` steps: checkpoint, then ACK the groups it covers (exactly-once,
   see ``learner.checkpoint``);
7. one metrics row to the buffer and one line to stdout (last, so a step retrained after a
   crash is not reported twice). ``step`` in the row is the 0-based step index s, the same s
   the feeder issues prompts for (``version // N_SGD``); ``version`` is the version after it.

Driver usage (a Ray cluster is up; the buffer server is running)::

    with Learner.from_url(cfg, buffer_url=url, run_id=run_id, model_dir=model_dir,
                          run_dir=run_dir, transport=RayObjectStoreTransport(run_id)) as learner:
        learner.run(num_steps)  # or: while ...: metrics = learner.step()
    # on a clean exit: final checkpoint + ACKs; the ranks are shut down either way
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import ray
import torch

from buffer.schema import Group, encode_group
from buffer.versions import group_lags
from learner import checkpoint as ckpt_io
from learner.advantages import compute_advantages
from learner.batching import Row, assign_to_ranks, plan_update, rows_from_groups, split_micro_batches
from learner.entropy_control import build_entropy_controller
from learner.errors import PolicyLagError
from learner.lag import LagReport, lag_report
from learner.loss import reduce_metrics
from learner.rank_actor import RankGroup
from learner.schedule import minibatch_schedule
from learner.step_metrics import combine_updates, lag_metrics, rollout_stats, summary_line
from learner.trainer_config import LearnerConfig


@dataclass
class _Collected:
    """The valid groups of one step plus what was dropped on the way."""

    entries: list[tuple[str, Group]] = field(default_factory=list)
    advantages: list[np.ndarray] = field(default_factory=list)   # per group (N,)
    loss_masks: list[np.ndarray] = field(default_factory=list)   # per group (N,) bool
    seen: list[tuple[Group, np.ndarray]] = field(default_factory=list)  # non-stale groups read, present mask
    read: int = 0
    zero_dropped: int = 0
    stale_responses: int = 0
    stale_groups: int = 0
    skipped_done: int = 0


@dataclass
class _StepPlan:
    """Everything the ranks need for the step's N_SGD updates."""

    rows: list[Row]
    v0: int                                     # version at the start of the step
    rank_plans: list[list[list[list[int]]]] = field(default_factory=list)  # [update][rank][micro-batch] -> rows
    lags: LagReport = field(default_factory=LagReport)
    alpha: float = 0.0                          # entropy coefficient for this step


class Learner:
    """Coordinator of one run's learner; owns the step loop, talks to ranks through Ray."""

    def __init__(self, cfg: LearnerConfig, *, buffer, model_dir: str | Path, run_dir: str | Path,
                 transport=None, ranks: RankGroup | None = None, resume: bool = True):
        self.cfg, self.buffer = cfg, buffer
        self.model_dir, self.run_dir = str(model_dir), Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if transport is None:
            from actors.weight_sync import RayObjectStoreTransport
            transport = RayObjectStoreTransport(buffer.run_id)
        self.transport = transport
        self._own_ranks = ranks is None
        if ranks is None:
            ranks = RankGroup(cfg, model_dir)
        else:
            ranks.check_compatible(cfg)
        self.ranks = ranks
        ranks.call("set_transport", transport)
        self.controller = build_entropy_controller(cfg.entropy)
        self.version = ranks.version()
        self.steps_done = 0
        self._unacked: list[tuple[str, str]] = []     # (entry id, group id) trained, not yet checkpointed
        # Group ids in the weights: the restored checkpoint's last groups, then every group trained
        # here. A group delivered again (Redis lost an ACK or a delivery past its fsync window) is
        # never trained twice.
        self._in_weights: set[str] = set()
        self._backlog: deque[tuple[str, Group]] = deque()
        self._deferred: list[tuple[str, Group]] = []  # sampled by a version the learner has not reached
        (self.run_dir / "learner_config.json").write_text(cfg.model_dump_json(indent=1))
        if cfg.print_metrics:
            print(f"[learner] config {cfg.model_dump_json()}", flush=True)
        last = ckpt_io.latest_checkpoint(self.run_dir) if resume else None
        if last is not None:
            self._restore(last)
        self._backlog.extend(self.buffer.pending_groups(cfg.consumer))

    @classmethod
    def from_url(cls, cfg: LearnerConfig, *, buffer_url: str, run_id: str, model_dir: str | Path,
                 run_dir: str | Path, transport=None, ranks: RankGroup | None = None,
                 resume: bool = True, buffer_cfg=None) -> Learner:
        """The launch driver's constructor: connect to the run's buffer (``buffer_cfg``: the run's
        BufferConfig, None = defaults), start the ranks."""
        from buffer import RunBuffer
        return cls(cfg, buffer=RunBuffer.from_url(buffer_url, run_id, buffer_cfg), model_dir=model_dir,
                   run_dir=run_dir, transport=transport, ranks=ranks, resume=resume)

    # --- data -----------------------------------------------------------------------------------
    def _read(self, need: int) -> list[tuple[str, Group]]:
        if self._backlog:
            return [self._backlog.popleft() for _ in range(min(need, len(self._backlog)))]
        return self.buffer.take_groups(self.cfg.consumer, need, self.cfg.block_ms)

    def _ack(self, entries: list[tuple[str, str]], outcome: str = "trained") -> None:
        if entries:
            self.buffer.ack_groups([e for e, _ in entries], [g for _, g in entries], outcome)

    def _collect(self) -> _Collected:
        cfg, col = self.cfg, _Collected()
        reached = [max(r.version_start for r in g.responses) <= self.version for _, g in self._deferred]
        ready = [x for x, ok in zip(self._deferred, reached) if ok]
        self._deferred = [x for x, ok in zip(self._deferred, reached) if not ok]
        self._backlog = deque(ready + list(self._backlog))
        deadline = None if cfg.data_timeout_s is None else time.monotonic() + cfg.data_timeout_s
        while len(col.entries) < cfg.rollout_batch:
            got = self._read(cfg.rollout_batch - len(col.entries))
            for entry_id, group in got:
                col.read += 1
                self._admit(entry_id, group, col)
            if not got:
                self._publish_need(cfg.rollout_batch - len(col.entries))
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"step {self.steps_done}: {len(col.entries)}/{cfg.rollout_batch} valid "
                                       f"groups after {cfg.data_timeout_s}s ({col.read} read)")
        self._publish_need(0)
        return col

    def _publish_need(self, groups: int) -> None:
        """Tell the feeder how many valid groups this step still lacks (``learner_need`` in the run's
        meta hash), so dynamic sampling tops up what is missing, not a fixed D_R/2 that ends up stale.
        Re-published on every empty read: the feeder only trusts a hint newer than its last answer."""
        self.buffer.set_meta(learner_need={"step": self.steps_done, "groups": groups, "time": time.time()})

    def _admit(self, entry_id: str, g: Group, col: _Collected) -> None:
        """Classify one group read from the buffer: duplicate, future, stale, zero-advantage, valid."""
        cfg = self.cfg
        unacked = {gid: e for e, gid in self._unacked} | {x.group_id: e for e, x in col.entries}
        if g.group_id in self._in_weights or g.group_id in unacked:
            col.skipped_done += 1
            if unacked.get(g.group_id) != entry_id:       # else the next checkpoint ACKs this entry
                self._ack([(entry_id, g.group_id)], "already_trained")
            return
        lag = group_lags(g, self.version)                                         # (N,)
        if (lag < 0).any():
            newest = max(r.version_start for r in g.responses)
            if newest <= self.buffer.get_version()[0]:
                # after a restore: sampled with weights the crashed learner had published; the
                # retrained updates reach that version again, then the group is used
                self._deferred.append((entry_id, g))
            else:                          # a version nobody published: corrupt, never trainable
                self.buffer.dead_letter("learner", "future_version", raw=encode_group(g), detail=(
                    f"group {g.group_id}: version_start {newest} > published and learner version {self.version}"))
                self._ack([(entry_id, g.group_id)], "stale")
            return
        present = np.ones(len(lag), dtype=bool)
        if cfg.mode == "on_policy":
            if lag.any() and g.step < self.steps_done:
                # Surplus of an earlier step's dynamic sampling: generated on-policy for its own step,
                # finished after that step was complete. Strict mode never trains it at lag > 0.
                col.stale_groups += 1
                col.stale_responses += len(lag)
                # stale dead letters record the decision, not a copy: the group stays in the groups
                # stream (retention), and stale groups can be a large share of an off-policy run
                self.buffer.dead_letter("learner", "stale", detail=(
                    f"group {g.group_id} of step {g.step} arrived at step {self.steps_done} (lags "
                    f"{sorted(set(lag.tolist()))}); strict on-policy trains only lag 0"))
                self._ack([(entry_id, g.group_id)], "stale")
                return
            if lag.any():
                raise PolicyLagError(f"strict on-policy: group {g.group_id} has response lags {lag.tolist()} "
                                     f"at learner version {self.version} (every token must be lag 0)")
        else:
            present = lag <= cfg.max_lag
            if not present.all():
                n_stale = int((~present).sum())
                col.stale_responses += n_stale
                self.buffer.dead_letter("learner", "stale", detail=(
                    f"group {g.group_id}: {n_stale}/{len(lag)} responses with lag > max_lag {cfg.max_lag} at "
                    f"version {self.version} (lags {sorted(set(lag.tolist()))}); "
                    + ("trained on the rest" if present.any() else "group dropped")))
                if not present.any():
                    col.stale_groups += 1
                    self._ack([(entry_id, g.group_id)], "stale")
                    return
        col.seen.append((g, present))
        res = compute_advantages(
            torch.tensor(g.rewards)[None], torch.tensor([r.length for r in g.responses])[None],
            torch.tensor([r.truncated for r in g.responses])[None], cfg.advantage,
            max_len=cfg.max_response_tokens, present=torch.from_numpy(present)[None])
        zero = bool(res.zero_groups[0])
        if zero and cfg.dynamic_sampling:
            col.zero_dropped += 1
            self._ack([(entry_id, g.group_id)], "filtered")
            return
        mask = res.loss_mask[0].numpy() & (not zero or not cfg.advantage.reject_zero_advantage)
        col.zero_dropped += int(zero and cfg.advantage.reject_zero_advantage)
        col.entries.append((entry_id, g))
        col.advantages.append(res.advantages[0].numpy())
        col.loss_masks.append(mask)

    # --- training ---------------------------------------------------------------------------------
    def _score(self, rows: list[Row], which: str, attr: str) -> None:
        """Fill ``rows[i].<attr>`` with log-probs of the current policy / reference (no grad)."""
        lengths = [r.input_len for r in rows]
        per_rank = assign_to_ranks(split_micro_batches(lengths, self.cfg.micro_batch_tokens), lengths,
                                   self.ranks.world)
        ref = ray.put(rows)
        for scored in self.ranks.call_each("score_rows", [(ref, per_rank[r], self.cfg.loss, which)
                                                                 for r in range(self.ranks.world)]):
            for i, values in scored.items():
                setattr(rows[i], attr, values)

    def _check_update_lags(self, report: LagReport, update: int) -> None:
        if self.cfg.mode == "on_policy" and report.sample_hist and report.max != 0:
            raise PolicyLagError(f"strict on-policy: update {update} at version {self.version + update} "
                                 f"would train lags {report.sample_hist}")

    def _publish(self) -> None:
        """Weights of the current version to the transport, then (version, location) to the buffer.

        After a restore the buffer may hold a newer version the crashed learner published; it
        never goes backwards, so versions below it are skipped until the retrained updates
        reach it again (equal is republished, refreshing the location).
        """
        if self.version < self.buffer.get_version()[0]:
            return
        location = self.ranks.call("publish", self.version)[0]
        self.buffer.publish_version(self.version, location)

    def _publish_due(self, version: int, last_of_step: bool) -> bool:
        """At versions divisible by sync_interval, and always after a step's last update: the
        feeder derives the learner's step from the published version (version // N_SGD)."""
        k = self.cfg.sync_interval
        return last_of_step or (k is not None and version % k == 0)

    def _plan(self, col: _Collected) -> _StepPlan:
        """Rows, optional pi_old / reference scoring, the update schedule and its lags."""
        cfg = self.cfg
        rows = rows_from_groups([g for _, g in col.entries], col.advantages, col.loss_masks)
        if cfg.old_logprobs == "recompute":
            self._score(rows, "policy", "old_logprobs")
        if cfg.needs_reference:
            self._score(rows, "reference", "ref_logprobs")
        by_group: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            by_group[r.group_index].append(i)
        schedule = minibatch_schedule(len(col.entries), cfg.mini_batch, cfg.n_reuse,
                                      seed=cfg.seed * 1_000_003 + self.steps_done, shuffle=cfg.shuffle)
        plan = _StepPlan(rows=rows, v0=self.version)
        for p in schedule:
            idx = [i for gi in p.group_indices for i in by_group[gi]]
            report = lag_report(plan.v0 + p.update_index,           # update u runs at version v0 + u
                                torch.tensor([rows[i].version_start for i in idx], dtype=torch.long),
                                torch.tensor([rows[i].loss_tokens for i in idx], dtype=torch.long))
            self._check_update_lags(report, p.update_index)
            plan.lags = plan.lags.merge(report)
            plan.rank_plans.append(plan_update(rows, idx, cfg.micro_batch_tokens, self.ranks.world))
        current = None
        if cfg.entropy.type == "adaptive" and cfg.entropy.indicator == "current_batch":
            current = float(-np.concatenate([r.old_logprobs for r in rows]).mean()) if rows else 0.0
        plan.alpha = self.controller.coef(current)
        return plan

    def _train(self, plan: _StepPlan) -> tuple[list[dict], list[dict], float]:
        """Run the step's updates on all ranks, in chunks that end where weights are published.

        Returns (per-update loss metrics reduced over ranks, per-update rank-0 info, sync seconds).
        """
        cfg, world, n = self.cfg, self.ranks.world, len(plan.rank_plans)
        rows_ref, per_update, infos, sync_s, chunk = ray.put(plan.rows), [], [], 0.0, []
        for u in range(n):
            chunk.append(u)
            last = u == n - 1
            if not (last or self._publish_due(plan.v0 + u + 1, False)):
                continue
            results = self.ranks.call_each("train_updates", [
                (rows_ref, [(plan.v0 + j, plan.rank_plans[j][r]) for j in chunk], cfg.loss, plan.alpha,
                 cfg.mode == "on_policy") for r in range(world)])
            for k in range(len(chunk)):
                per_update.append(reduce_metrics([results[r][k][0] for r in range(world)]))
                infos.append(results[0][k][1])
            self.version += len(chunk)
            chunk = []
            if self._publish_due(self.version, last):
                ts = time.monotonic()
                self._publish()
                sync_s += time.monotonic() - ts
        return per_update, infos, sync_s

    def _finish(self, col: _Collected) -> None:
        """Count the step; checkpoint (and ACK what it covers) when due, or ACK now without checkpoints."""
        self._unacked.extend((e, g.group_id) for e, g in col.entries)
        self._in_weights.update(g.group_id for _, g in col.entries)
        self.steps_done += 1
        if self.cfg.checkpoint_every == 0:
            self._ack(self._unacked)
            self._unacked = []
        elif self.steps_done % self.cfg.checkpoint_every == 0:
            self.save_checkpoint()

    def step(self) -> dict:
        """One learner step (module docstring); returns its metrics row (also written to the buffer)."""
        cfg, t0 = self.cfg, time.monotonic()
        col = self._collect()
        t_data = time.monotonic()
        plan = self._plan(col)
        t_prep = time.monotonic()
        per_update, infos, sync_s = self._train(plan)
        t_train = time.monotonic() - t_prep - sync_s
        tokens = [i["tokens/global"] for i in infos]
        losses = combine_updates(per_update, tokens)
        self.controller.update(losses.get("entropy/mean", 0.0))
        norms = [i["grad/norm"] for i in infos]
        m = {"step": self.steps_done, "version": self.version, "mode": cfg.mode, "updates": len(infos),
             **rollout_stats([g for g, _ in col.seen], [p for _, p in col.seen]),
             "groups/read": col.read, "groups/trained": len(col.entries), "groups/zero_adv_dropped": col.zero_dropped,
             "groups/stale_dropped": col.stale_groups, "groups/skipped_done": col.skipped_done,
             **lag_metrics(plan.lags, col.stale_responses), **losses, "entropy/coef": plan.alpha,
             **{k: v for k, v in self.controller.metrics().items() if k != "entropy/coef"},
             "grad/norm": float(np.mean(norms)), "grad/norm_max": float(np.max(norms)), "lr": infos[-1]["lr"],
             "tokens/trained": float(sum(tokens)), "tokens/trained_per_s": float(sum(tokens)) / max(t_train, 1e-9),
             "time/wait_data": t_data - t0, "time/prepare": t_prep - t_data, "time/train": t_train,
             "time/weight_sync": sync_s}
        if cfg.needs_reference:
            m["kl/mean"] = losses.get("kl/ref_k3", 0.0)
        t_ck = time.monotonic()
        self._finish(col)
        m["time/checkpoint"] = time.monotonic() - t_ck
        m["time/step"] = time.monotonic() - t0
        self.buffer.write_metrics(m)
        if cfg.print_metrics:
            print(summary_line(m), flush=True)
        return m

    def run(self, num_steps: int) -> list[dict]:
        return [self.step() for _ in range(num_steps)]

    # --- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Save everything (``learner.checkpoint``), commit it, then ACK the groups it covers."""
        path = ckpt_io.checkpoint_dir(self.run_dir, self.steps_done)
        if path.exists() and path != ckpt_io.latest_checkpoint(self.run_dir):
            shutil.rmtree(path)                    # half-written by a crashed incarnation
        self.ranks.call("save_checkpoint", str(path), self.model_dir)
        state = ckpt_io.LearnerState(
            step=self.steps_done, version=self.version, entropy_controller=self.controller.state_dict(),
            group_ids=[g for _, g in self._unacked], stream_position=self.buffer.stream_position(),
            config=json.loads(self.cfg.model_dump_json()), saved_at=time.time())
        ckpt_io.write_learner_state(path, state)
        ckpt_io.commit(self.run_dir, path, self.cfg.keep_checkpoints)
        self._ack(self._unacked)
        self._unacked = []
        return path

    def _restore(self, path: Path) -> None:
        state = ckpt_io.read_learner_state(path)
        saved_run = (state.stream_position or {}).get("run_id")
        if saved_run is not None and saved_run != self.buffer.run_id:
            raise ValueError(f"checkpoint {path} belongs to run {saved_run!r}, the buffer is run "
                             f"{self.buffer.run_id!r}: pass resume=False or the matching run_dir")
        versions = set(self.ranks.call("load_checkpoint", str(path)))
        if versions != {state.version}:
            raise RuntimeError(f"checkpoint {path}: ranks restored versions {versions}, learner.json says {state.version}")
        self.version, self.steps_done = state.version, state.step
        self.controller.load_state_dict(state.entropy_controller)
        self._in_weights = set(state.group_ids)
        published, _ = self.buffer.get_version()
        self._publish()   # actors (possibly restarted with the init weights) rejoin at this version
        if self.cfg.print_metrics:
            print(f"[learner] resumed from {path} at step {self.steps_done}, version {self.version} "
                  f"(buffer at {published})", flush=True)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the current weights (HF names); a collective under ZeRO-3."""
        return self.ranks.call("full_state_dict")[0]

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(checkpoint=exc_type is None)   # after an error the state may be mid-step

    def close(self, checkpoint: bool = True) -> None:
        """Final checkpoint (covering and ACKing the last groups), then shut the ranks down if owned."""
        if checkpoint and self.cfg.checkpoint_every > 0 and self._unacked:
            self.save_checkpoint()
        if self._own_ranks:
            self.ranks.shutdown()
