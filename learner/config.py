"""Typed, bounded configs for the learner's pure math (DESIGN.md §4).

Only the sub-configs the loss/advantage/entropy/schedule functions read live here; the
DeepSpeed learner composes them into its full ``LearnerConfig``. Every model forbids unknown
keys (a typo in a preset fails loudly) and validates on assignment.

References: Skywork-OR1 / MAGIC (He et al. 2025, arXiv:2505.22312), DAPO (Yu et al. 2025,
arXiv:2503.14476), dual-clip PPO (Ye et al. 2020, arXiv:1912.09729), k3 KL estimator
(Schulman 2020, "Approximating KL divergence").
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AdvantageConfig(_Config):
    """GRPO group advantages, truncation masks and DAPO overlong shaping."""

    reward_scale: Literal["binary", "signed"] = Field(
        "binary", description="Correctness reward r in [0, 1] used as is ('binary', 0/1) or mapped "
        "to 2r - 1 ('signed', ±1). Group normalisation is affine-invariant, so this only matters "
        "relative to the overlong penalty (Skywork-OR1 uses a 1/0 reward).")
    truncation_mask: Literal["none", "before", "after"] = Field(
        "none", description="Advantage mask for truncated responses (Skywork-OR1 advantage-mask ablation): "
        "'none' keeps them (the paper's final choice); 'before' drops them before the group "
        "statistics; 'after' computes statistics with them, then zeroes their advantage. Masked "
        "responses leave the loss and the token count T.")
    overlong_cache: int | None = Field(
        None, ge=1, description="DAPO soft overlong punishment interval L_cache (tokens); None = "
        "off. Penalty 0 for |y| <= L_max - L_cache, (L_max - L_cache - |y|)/L_cache down to -1 "
        "at L_max, -1 beyond; added to the reward (DAPO overlong reward shaping, L_cache = 4096 there).")
    overlong_filter: bool = Field(
        False, description="DAPO overlong filtering: truncated responses keep their place in the "
        "group statistics but are masked out of the loss (advantage 0, not counted in T).")
    reject_zero_advantage: bool = Field(
        True, description="Drop groups whose responses all have zero advantage (all rewards "
        "equal) before the update (Skywork-OR1 rejection sampling, DAPO dynamic sampling).")
    std_eps: float = Field(
        1e-6, gt=0, le=1, description="eps in A = (r - mean) / (std + eps), std with Bessel.")


class PolicyLossConfig(_Config):
    """Token-level clipped policy loss (MAGIC/DAPO) with optional dual-clip and k3 KL."""

    eps_low: float = Field(0.2, ge=0, lt=1, description="Lower clip: rho >= 1 - eps_low.")
    eps_high: float = Field(
        0.2, ge=0, description="Upper clip: rho <= 1 + eps_high. > eps_low is DAPO clip-higher "
        "(0.28 in DAPO; the report sweeps 0.2, 0.25, 0.265, 0.28).")
    dual_clip: float | None = Field(
        None, gt=1, description="Dual-clip constant c (3 in Ye et al. 2020): for A < 0 the "
        "per-token objective is max(min(rho A, clip(rho) A), c A). None = off.")
    kl_beta: float = Field(
        0.0, ge=0, description="Weight of the k3 KL to a frozen reference (0 = off; Skywork-OR1 "
        "trains without KL, its ablation uses 1e-3).")
    logprob_chunk_size: int = Field(
        1024, ge=1, description="Tokens per chunk when computing log-probs and entropies from "
        "(B, L, V) logits; bounds the fp32 (chunk, V) intermediates.")


class NoEntropy(_Config):
    """alpha = 0: no entropy term (ablation)."""

    type: Literal["none"] = "none"


class FixedEntropy(_Config):
    """Constant alpha (Skywork-OR1 ablation sweeps 1e-4 ... 1e-2)."""

    type: Literal["fixed"] = "fixed"
    coef: float = Field(1e-3, ge=0, description="Entropy coefficient alpha.")


class AdaptiveEntropy(_Config):
    """Skywork-OR1 adaptive entropy control (report section "Adaptive Entropy Control").

    After each learner step with mean entropy e: c <- clip(c + delta if e < target else
    c - delta, c_min, c_max); the coefficient used is alpha = c * 1{e <= target}. Defaults are
    the released training scripts' values (delta 1e-4, c_max 5e-3); the report text uses
    delta = 5e-3. See ``learner.entropy_control`` for which entropy the indicator reads.
    """

    type: Literal["adaptive"] = "adaptive"
    target: float = Field(0.2, ge=0, description="Target entropy tgt-ent (nats), 0.2 in the report.")
    delta: float = Field(1e-4, ge=0, description="Step Δ of c per learner step (scripts 1e-4, report 5e-3).")
    c_init: float = Field(0.0, ge=0, description="c_0 (0 in the report).")
    c_min: float = Field(0.0, ge=0, description="Lower bound of c (scripts: 0).")
    c_max: float = Field(0.005, ge=0, description="Upper bound of c (scripts: 0.005).")
    indicator: Literal["previous_step", "current_batch"] = Field(
        "previous_step", description="Entropy in 1{e <= target}: 'previous_step' = the last "
        "entropy passed to update() (released code); 'current_batch' = an entropy of the batch "
        "about to be trained on, which the learner must pass to coef() (report's formula).")

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveEntropy:
        if not self.c_min <= self.c_init <= self.c_max:
            raise ValueError(f"need c_min <= c_init <= c_max, got {self.c_min}, {self.c_init}, {self.c_max}")
        return self


EntropyConfig = Annotated[Union[AdaptiveEntropy, FixedEntropy, NoEntropy], Field(discriminator="type")]


class BatchConfig(_Config):
    """Rollout / mini-batch sizes of one learner step (the one home of N_SGD).

    N_SGD = (D_R / D_T) * N_reuse optimizer updates per learner step. Groups stay whole; the
    group size gs is the run's (``RunConfig.group_size``), not a batch setting.
    """

    rollout_batch: int = Field(64, ge=1, description="D_R: valid groups (prompts) per learner step.")
    mini_batch: int = Field(64, ge=1, description="D_T: groups per optimizer update; divides D_R.")
    n_reuse: int = Field(1, ge=1, description="N_reuse: passes over each rollout batch.")
    shuffle: bool = Field(True, description="Seeded shuffle of the groups at every pass.")

    @model_validator(mode="after")
    def _divisible(self) -> BatchConfig:
        if self.rollout_batch % self.mini_batch:
            raise ValueError(f"rollout_batch D_R={self.rollout_batch} must be a multiple of "
                             f"mini_batch D_T={self.mini_batch}")
        return self

    @property
    def updates_per_pass(self) -> int:
        """D_R / D_T mini-batches (optimizer updates) per pass over the rollout batch."""
        return self.rollout_batch // self.mini_batch

    @property
    def n_sgd(self) -> int:
        """Optimizer updates per learner step, (D_R / D_T) * N_reuse."""
        return self.updates_per_pass * self.n_reuse
