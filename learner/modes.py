"""What one learner step trains with: the configured mode, or the lag guard's strict on-policy fallback.

The configured mode is the run's lag policy (``LearnerConfig.lag``, ``learner.lag_policy``): on_policy and
fixed:0 are strict on-policy, sync, bounded:N and fixed:k >= 1 off-policy (sync: max_lag 0, so the feeder
issues a step's prompts for the version the step starts at and admission drops an earlier step's surplus). When the lag guard (``learner.guard``)
falls back, the steps of the hold run strict on-policy (DESIGN.md §3) with the run's rollout
batch: N_reuse 1, D_T = D_R (one update per step), max_lag 0, a symmetric clip at the run's
eps_low. Groups sampled beyond the new lag bound are dropped and counted at admission, not
trained, and not an error: unlike a run configured on-policy, whose stale data means a bug.

Fixed-lag mode (``--learner.lag fixed:k``) is a configured mode: every trained token must
have update lag exactly k (``required_lag``), checked at every update like strict on-policy's 0;
for k >= 1 the feeder pins each prompt to the version s - k its step s needs (``StepClock.fixed_lag``).
"""

from __future__ import annotations

from dataclasses import dataclass
from buffer.versions import StepClock, fixed_lag_required
from learner.config import BatchConfig, PolicyLossConfig
from learner.lag_policy import ModeName
from learner.trainer_config import LearnerConfig


@dataclass(frozen=True)
class StepMode:
    name: ModeName
    batch: BatchConfig
    max_lag: int
    loss: PolicyLossConfig
    guard_fallback: bool = False   # the guard's on-policy: stale data is dropped, not an error
    fixed_lag: int | None = None   # every trained token at update lag exactly this (None: off)

    @property
    def strict(self) -> bool:
        """Every trained token must be lag 0 (checked at every update)."""
        return self.name == "on_policy"

    def required_lag(self, version: int) -> int | None:
        """The one update lag every token trained at ``version`` must have (checked at every update),
        or None: 0 on-policy, k under fixed lag (less during the ramp-in, ``fixed_lag_required``)."""
        if self.strict:
            return 0
        return None if self.fixed_lag is None else fixed_lag_required(version, self.fixed_lag)

    @property
    def pinned(self) -> bool:
        """Prompts name the exact version to sample with (fixed lag k >= 1)."""
        return bool(self.fixed_lag)

    def clock(self, step: int, version: int) -> StepClock:
        """The admission clock from ``step`` (at ``version``) on, for the feeder."""
        return StepClock(step=step, version=version, updates_per_step=self.batch.n_sgd, max_lag=self.max_lag,
                         fixed_lag=self.fixed_lag or None)


def configured_mode(cfg: LearnerConfig) -> StepMode:
    return StepMode(cfg.mode, cfg.batch, cfg.max_lag, cfg.loss, fixed_lag=cfg.fixed_lag)


def fallback_mode(cfg: LearnerConfig) -> StepMode:
    """Strict on-policy with the run's rollout batch and its lower clip on both sides."""
    batch = cfg.batch.model_copy(update={"mini_batch": cfg.batch.rollout_batch, "n_reuse": 1})
    loss = cfg.loss.model_copy(update={"eps_high": cfg.loss.eps_low})
    return StepMode("on_policy", batch, 0, loss, guard_fallback=True)


def mode_for(cfg: LearnerConfig, guard_mode: ModeName) -> StepMode:
    """The step's mode when the guard answers ``guard_mode`` (it only ever says on_policy to fall back)."""
    return fallback_mode(cfg) if guard_mode == "on_policy" and cfg.mode == "off_policy" else configured_mode(cfg)
