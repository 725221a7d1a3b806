"""The learner coordinator: the order of one step. Buffer -> advantages -> N_SGD updates -> weights.

One ``Learner.step()`` (step s, starting at policy version v0 = s * N_SGD when nothing was
skipped):

0. the step's mode (``learner.modes``): the configured one, or strict on-policy while the lag
   guard (``learner.guard``, off by default) holds the run there;
1. admission (``learner.admission``): D_R valid groups with their GRPO advantages; stale,
   duplicate, future and zero-advantage groups are dropped, dead-lettered or deferred there
   (PRIME: groups outside the accuracy band are filtered instead);
2. the plan (``learner.step_plan``): rows of the responses in the loss, optional pi_old recompute /
   reference log-probs, with PRIME the PRM's update, the mini-batch schedule: update u of the step
   runs at version v0 + u, so reuse adds lag 0..N_SGD-1 on top of the actors' lag (``lag/*``, the
   update lag; ``lag_start/*`` is the generation lag at v0); each mini-batch is split into
   token-budget micro-batches dealt evenly to the ranks. A mini-batch without any loss token is not
   an update (no version): the later updates move up one version and the step publishes a fresh
   admission clock for the feeder (its version arithmetic assumed N_SGD updates);
3. the updates on the ranks; weights are published through the transport every
   ``sync_interval`` updates and after the step's last update (:meth:`Learner._publish`); while
   they run, an off-policy learner takes the next step's groups already written and reports the
   ones it will not use, so the feeder replaces them now (``Admission.look_ahead``);
4. entropy controller update, then the guard reads the step's metrics and picks the next step's
   mode; a switch is an event in the metrics row (``guard/event``) and republishes the admission
   clock the feeder issues prompts by (``buffer.versions.StepClock``). A step that trained no
   token has entropy NaN (not 0): neither the controller nor the guard reads it as a collapse;
5. every ``checkpoint_every`` steps: checkpoint, then ACK the groups it covers (exactly-once,
   see ``learner.checkpoint``); under a fixed lag k the checkpoint also keeps the k versions
   before its own (``learner.lagged_weights``), republished into the transport on resume;
6. one metrics row to the buffer (last, so a step retrained after a crash is not reported
   twice). ``step`` in the row is the 0-based step index s, the same s the feeder issues
   prompts for (``StepClock.step_at``); ``version`` is the version after it.

The learner prints nothing per step: :meth:`Learner.step` returns the row and the caller shows it.

Driver usage (a Ray cluster is up; the buffer server is running)::

    with Learner.from_url(cfg, buffer_url=url, run_id=run_id, model_dir=model_dir, run_dir=run_dir,
                          transport=transport_for(actor_cfg.transport_or_default(), run_id), temperature=1.0,
                          group_size=16) as learner:
        actors = create_generation_actors(..., transport=learner.actor_transport)
        learner.sync_actors(actor_ids, timeout_s)   # a collective transport forms its group here
        learner.run(num_steps)  # or: while ...: metrics = learner.step()
    # on a clean exit: final checkpoint + ACKs; the ranks are shut down either way
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import ray
import torch

from actors.transport import WeightTransport, check_serves_versions
from learner import checkpoint as ckpt_io
from learner.admission import Admission, Collected, TrainedLedger
from learner.batching import Row
from learner.entropy_control import build_entropy_controller
from learner.guard import Guard
from learner.lag import finish_covariance
from learner.lagged_weights import lagged_versions, republish_lagged, save_lagged
from learner.modes import StepMode, mode_for
from learner.rank_actor import RankGroup
from learner.reduce import combine_updates, reduce_metrics
from learner.step_metrics import rollout_stats
from learner.step_path import StepTimes, path_metrics
from learner.step_plan import StepPlan, StepPlanner
from learner.trainer_config import LearnerConfig
from learner.weight_sync import WeightSync


class Learner:
    """Coordinator of one run's learner; owns the step loop, talks to ranks through Ray.

    ``temperature``, ``group_size`` and ``seed`` are the run's (the actors sample with the same): the
    learner divides its logits by the temperature, sizes DeepSpeed's bookkeeping by the group, and
    seeds its mini-batch shuffles and torch on its ranks with the seed.
    """

    def __init__(self, cfg: LearnerConfig, *, buffer, model_dir: str | Path, run_dir: str | Path,
                 transport: WeightTransport, temperature: float, group_size: int, seed: int = 0,
                 ranks: RankGroup | None = None, resume: bool = True, on_transport=None):
        check_serves_versions(transport, cfg.versions_needed)     # fixed lag: before any engine starts
        self.cfg, self.buffer, self.transport = cfg, buffer, transport
        self.temperature, self.seed = temperature, seed
        # fixed lag k >= 1: every version goes to the transport, also while replaying below the
        # published one after a resume (prompts pinned to it may be waiting)
        self._keeps_versions = cfg.versions_needed > 1
        self.model_dir, self.run_dir = str(model_dir), Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # checkpoints: the run directory's, or learner.checkpoint_dir/<run_id> (shared storage on a cluster)
        self.ckpt_home = Path(cfg.checkpoint_dir) / buffer.run_id if cfg.checkpoint_dir else self.run_dir
        self._own_ranks = ranks is None
        # rank 0's bound transport is what the actors get (a collective one: with its hub's address);
        # ``on_transport(actor_transport)`` runs as soon as it exists (a new rank group: before its
        # engines are set up, so actors may build theirs meanwhile)
        if ranks is None:
            ranks = RankGroup(cfg, model_dir, group_size, seed, transport=transport, on_transport=on_transport)
        else:
            ranks.check_compatible(cfg)
            ranks.actor_transport = ranks.call("set_transport", transport)[0]
            if on_transport is not None:
                on_transport(ranks.actor_transport)
        self.ranks = ranks
        self.actor_transport = ranks.actor_transport
        self.weight_sync = WeightSync(ranks, buffer, transport)
        if cfg.prime is not None:
            ranks.call("setup_prm", cfg)          # PRIME's implicit PRM beside the policy (learner.prm_engine)
        self.controller = build_entropy_controller(cfg.entropy)
        self.planner = StepPlanner(cfg, ranks, temperature, seed)
        self.guard = Guard(cfg.guard, entropy_target=getattr(cfg.entropy, "target", None))
        self.version = ranks.version()
        self.steps_done = 0
        self._published_at: dict[int, tuple[float, float]] = {}   # version -> (publish started, in the buffer)
        self.ledger = TrainedLedger(buffer)
        (self.run_dir / "learner_config.json").write_text(cfg.model_dump_json(indent=1))
        last = ckpt_io.latest_checkpoint(self.ckpt_home) if resume else None
        self.resumed_from = None
        if last is not None:
            self._restore(last)
        elif self._keeps_versions:
            # the initial weights are version 0 of the transport too: actors that moved on load them
            # again for prompts pinned to version 0 (the ramp-in and its top-ups)
            self._publish()
        self.mode: StepMode = mode_for(cfg, self.guard.mode)
        self._publish_clock()
        self.admission = Admission(cfg, buffer, self.ledger,
                                   on_wait=lambda: self.weight_sync.upkeep(self.version))

    @classmethod
    def from_url(cls, cfg: LearnerConfig, *, buffer_url: str, run_id: str, buffer_cfg=None, **kwargs) -> Learner:
        """The launch driver's constructor: connect to the run's buffer (``buffer_cfg``: the run's
        BufferConfig, None = defaults), start the ranks; ``kwargs`` as for the constructor."""
        from buffer import RunBuffer
        return cls(cfg, buffer=RunBuffer.from_url(buffer_url, run_id, buffer_cfg), **kwargs)

    # --- training ---------------------------------------------------------------------------------
    def _publish(self) -> None:
        """Weights of the current version to the transport, (version, location) to the buffer, then
        the transport's after-announce half (a collective broadcasts there).

        After a restore the buffer may hold a newer version the crashed learner published; it
        never goes backwards, so versions below it are not announced until the retrained updates
        reach it again (equal is republished, refreshing the location). Under a fixed lag they
        still go to the transport: prompts pinned to them may be waiting.
        """
        replaying = self.version < self.buffer.get_version()[0]
        if replaying and not self._keeps_versions:
            return
        started = time.time()
        location = self.ranks.call("publish", self.version)[0]
        if replaying:
            return
        self.buffer.publish_version(self.version, location)
        self._published_at[self.version] = (started, time.time())
        for old in [v for v in self._published_at if v < self.version - 4 * self.cfg.batch.n_sgd - self.cfg.max_lag]:
            del self._published_at[old]            # only the versions a coming step's path may need
        self.weight_sync.announce()

    def sync_actors(self, actor_ids: list[str], timeout_s: float) -> None:
        """Start-up: wait until every actor is registered with the transport, then send the current
        version to all of them (a collective transport forms its first group here; the object
        store has no membership and returns at once)."""
        if self.weight_sync.wait_for_actors(actor_ids, timeout_s):
            self._publish()

    def _publish_due(self, version: int, last_of_step: bool) -> bool:
        """At versions divisible by sync_interval, and always after a step's last update: the
        feeder derives the learner's step from the published version."""
        k = self.cfg.sync_interval
        return last_of_step or (k is not None and version % k == 0)

    def _train(self, plan: StepPlan) -> tuple[list[dict], list[dict], float]:
        """Run the step's updates on all ranks, in chunks that end where weights are published.

        Returns (per-update loss metrics reduced over ranks, per-update rank-0 info, sync seconds).
        """
        world, n = self.ranks.world, len(plan.rank_plans)
        rows_ref, per_update, infos, sync_s, chunk = ray.put(plan.rows), [], [], 0.0, []
        self._trained_at = time.time()           # no update: training was done at once
        # off-policy: the next batch is being generated meanwhile; its losses go to the feeder now
        mode, next_version = self.mode, plan.v0 + n
        look_ahead = lambda: self.admission.look_ahead(self.steps_done + 1, next_version, mode)  # noqa: E731
        for u in range(n):
            chunk.append(u)
            last = u == n - 1
            if not (last or self._publish_due(plan.v0 + u + 1, False)):
                continue
            results = self.ranks.call_each("train_updates", [
                (rows_ref, [(plan.v0 + j, plan.rank_plans[j][r], plan.required_lags[j]) for j in chunk],
                 self.mode.loss, self.temperature, plan.alpha) for r in range(world)], while_waiting=look_ahead)
            for k in range(len(chunk)):
                per_update.append(reduce_metrics([results[r][k][0] for r in range(world)]))
                infos.append(results[0][k][1])
            self.version += len(chunk)
            self._trained_at = time.time()
            chunk = []
            if self._publish_due(self.version, last):
                ts = time.monotonic()
                self._publish()
                sync_s += time.monotonic() - ts
        return per_update, infos, sync_s

    def _finish(self, col: Collected) -> None:
        """Count the step; checkpoint (and ACK what it covers) when due, or ACK now without checkpoints."""
        self.ledger.trained(col.entries)
        self.steps_done += 1
        if self.cfg.checkpoint_every == 0:
            self.ledger.ack_trained()
        elif self.steps_done % self.cfg.checkpoint_every == 0:
            self.save_checkpoint()

    def step(self, should_stop: Callable[[], bool] | None = None) -> dict:
        """One learner step (module docstring); returns its metrics row (also written to the buffer).
        ``should_stop()`` True while the step waits for data raises StepInterrupted (nothing trained)."""
        cfg, t0, started = self.cfg, time.monotonic(), time.time()
        mode = self.mode
        anchor = self._published_at.get(mode.clock(self.steps_done, self.version).min_version(self.steps_done))
        col = self.admission.collect(self.version, self.steps_done, mode, should_stop)
        t_data = time.monotonic()
        plan = self.planner.plan(col, mode=mode, step=self.steps_done, v0=self.version, controller=self.controller)
        t_prep = time.monotonic()
        per_update, infos, sync_s = self._train(plan)
        t_train = time.monotonic() - t_prep - sync_s
        tokens = [i["tokens/global"] for i in infos]
        losses = finish_covariance(combine_updates(per_update, tokens))
        losses["entropy/mean"] = losses.get("entropy/mean", float("nan"))     # no token trained: NaN, not 0
        self.controller.update(losses["entropy/mean"] if sum(tokens) > 0 else None)
        norms = [i["grad/norm"] for i in infos]
        nan = float("nan")
        m = {"step": self.steps_done, "version": self.version, "mode": mode.name, "updates": len(infos),
             "updates_skipped_empty": float(plan.skipped),
             **rollout_stats([g for g, _ in col.seen], [p for _, p in col.seen]), **col.metrics(),
             **plan.lags.metrics(), **plan.start_lags.metrics("lag_start/"), **plan.metrics, **losses,
             "entropy/coef": plan.alpha, **{k: v for k, v in self.controller.metrics().items() if k != "entropy/coef"},
             "grad/norm": float(np.mean(norms)) if norms else nan,
             "grad/norm_max": float(np.max(norms)) if norms else nan,
             "lr": infos[-1]["lr"] if infos else nan,
             "tokens/trained": float(sum(tokens)), "tokens/trained_per_s": float(sum(tokens)) / max(t_train, 1e-9),
             "time/wait_data": t_data - t0, "time/prepare": t_prep - t_data, "time/train": t_train,
             "time/weight_sync": sync_s, **self.weight_sync.metrics(),
             **path_metrics(StepTimes(anchor=anchor[0] if anchor else started,
                                      published=anchor[1] if anchor else math.nan, read=col.done_at,
                                      trained=self._trained_at, groups=col.hops))}
        if cfg.needs_reference:
            m["kl/mean"] = losses.get("kl/ref_k3", 0.0)
        next_mode = self._watch(m)
        t_ck = time.monotonic()
        self._finish(col)
        m["time/checkpoint"] = time.monotonic() - t_ck
        m["time/step"] = time.monotonic() - t0
        if next_mode != self.mode or len(infos) != mode.batch.n_sgd:
            # a new mode, or fewer versions than the clock assumed (skipped updates): re-anchor it
            self.mode = next_mode
            self._publish_clock()
        self.buffer.write_metrics(m)
        return m

    def _watch(self, m: dict) -> StepMode:
        """The guard reads the step's row (it adds its own metrics and a switch event to it);
        returns the next step's mode."""
        if not self.cfg.guard.enabled:
            return self.mode
        decision = self.guard.observe(m, step=self.steps_done)
        m.update(decision.metrics)
        m["guard/on_policy"] = float(self.mode.guard_fallback)     # this step's mode (the guard's is the next's)
        if decision.event is not None:
            m["guard/event"] = decision.event.to_dict()
        return mode_for(self.cfg, decision.mode)

    def _publish_clock(self) -> None:
        """How versions map to steps from the next step on, for the feeder's admission."""
        self.buffer.set_meta(learner_clock=self.mode.clock(self.steps_done, self.version).to_dict())

    def run(self, num_steps: int, log=None) -> list[dict]:
        """``num_steps`` steps; ``log(row)`` after each (e.g. ``lambda m: print(summary_line(m))``)."""
        rows = []
        for _ in range(num_steps):
            rows.append(self.step())
            if log is not None:
                log(rows[-1])
        return rows

    # --- checkpoints -------------------------------------------------------------------------------
    def token_entropies(self, rows: list[Row], temperature: float) -> list[np.ndarray]:
        """The current policy's entropy of softmax(logits / ``temperature``) at every response token of
        ``rows`` (the full next-token distribution, not the sampled token), per row; between steps only."""
        got = self.planner.per_token(rows, "policy", "entropy", temperature)
        return [got[i] for i in range(len(rows))]

    def save_checkpoint(self) -> Path:
        """Save everything (``learner.checkpoint``), commit it, then ACK the groups it covers."""
        path = ckpt_io.checkpoint_dir(self.ckpt_home, self.steps_done)
        if path.exists() and path != ckpt_io.latest_checkpoint(self.ckpt_home):
            shutil.rmtree(path)                    # half-written by a crashed incarnation
        self.ranks.call("save_checkpoint", str(path), self.model_dir)
        ckpt_io.require_visible(path, self.ranks.world, _on_nodes(getattr(self.ranks, "nodes", [])))
        if self._keeps_versions:                   # the versions pinned prompts need after a resume
            save_lagged(path, self.transport, lagged_versions(self.version, self.cfg.fixed_lag))
        state = ckpt_io.LearnerState(
            step=self.steps_done, version=self.version, entropy_controller=self.controller.state_dict(),
            group_ids=self.ledger.pending_ids(), stream_position=self.buffer.stream_position(),
            guard=self.guard.state_dict() if self.cfg.guard.enabled else None,
            config=json.loads(self.cfg.model_dump_json()), saved_at=time.time())
        ckpt_io.write_learner_state(path, state)
        ckpt_io.commit(self.ckpt_home, path, self.cfg.keep_checkpoints)
        self.ledger.ack_trained()
        return path

    def _restore(self, path: Path) -> None:
        state = ckpt_io.read_learner_state(path)
        saved_run = (state.stream_position or {}).get("run_id")
        if saved_run is not None and saved_run != self.buffer.run_id:
            raise ValueError(f"checkpoint {path} belongs to run {saved_run!r}, the buffer is run "
                             f"{self.buffer.run_id!r}: pass resume=False or the matching run_dir")
        if self.cfg.prime is not None and not (path / ckpt_io.PRM_DIR).is_dir():
            raise ValueError(f"checkpoint {path} has no PRM ({ckpt_io.PRM_DIR}/): it was not saved by a PRIME run")
        versions = set(self.ranks.call("load_checkpoint", str(path)))
        if versions != {state.version}:
            raise RuntimeError(f"checkpoint {path}: ranks restored versions {versions}, learner.json says {state.version}")
        self.version, self.steps_done = state.version, state.step
        self.controller.load_state_dict(state.entropy_controller)
        if state.guard is not None and self.cfg.guard.enabled:
            self.guard.load_state_dict(state.guard)
        self.ledger.restore(state.group_ids)
        self.resumed_from = {"path": str(path), "step": self.steps_done, "version": self.version,
                             "published": self.buffer.get_version()[0]}
        self._publish()   # actors (possibly restarted with the init weights) rejoin at this version
        if self._keeps_versions:                   # fixed lag: prompts pinned to the k versions before it
            self.resumed_from["republished"] = republish_lagged(path, self.transport)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the current weights (HF names); a collective under ZeRO-3."""
        return self.ranks.call("full_state_dict")[0]

    def prm_state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the PRIME PRM's weights (HF names); a collective under ZeRO-3."""
        return self.ranks.call("prm_state_dict")[0]

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(checkpoint=exc_type is None)   # after an error the state may be mid-step

    def close(self, checkpoint: bool = True) -> None:
        """Final checkpoint (covering and ACKing the last groups), then shut the ranks down if owned."""
        if checkpoint and self.cfg.checkpoint_every > 0 and self.ledger.unacked:
            self.save_checkpoint()
        if self._own_ranks:
            self.ranks.shutdown()


def _on_nodes(nodes: list[dict]) -> str:
    """' on node gen-1 (127.0.0.1)' for the ranks' locations (actors.cluster.placement), or ''."""
    names = sorted({f"{n.get('name', '?')} ({n.get('ip', '?')})" for n in nodes})
    return f" on node {', '.join(names)}" if names else ""
