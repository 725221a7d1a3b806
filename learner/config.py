"""Typed, bounded configs for the learner's pure math (DESIGN.md §4).

Only the sub-configs the loss/advantage/entropy/schedule functions read live here; the
DeepSpeed learner composes them into its full ``LearnerConfig``. Every model forbids unknown
keys (a typo in a preset fails loudly) and validates on assignment.

References: Skywork-OR1 / MAGIC (He et al. 2025, arXiv:2505.22312), DAPO (Yu et al. 2025,
arXiv:2503.14476), dual-clip PPO (Ye et al. 2020, arXiv:1912.09729), k3 KL estimator
(Schulman 2020, "Approximating KL divergence"). Off-policy corrections
(``PolicyLossConfig.correction``) are documented in ``learner.corrections``; the lag guard's
rules and thresholds (``GuardConfig``) in ``learner.guard_rules``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AdvantageConfig(_Config):
    """Group advantages (GRPO or RLOO), truncation masks and DAPO overlong shaping."""

    estimator: Literal["grpo", "rloo"] = Field(
        "grpo", description="'grpo': A = (r - mean) / (std + eps) over the group (Shao et al. 2024); "
        "'rloo': A_i = r_i - mean of the other responses' rewards, no std (Ahmadian et al. 2024, "
        "arXiv:2402.14740; Sky-T1-7B's final RL stage). RLOO is not scale-invariant: 'signed' "
        "rewards double its advantages.")
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
        1e-6, gt=0, le=1, description="eps in A = (r - mean) / (std + eps), std with Bessel (GRPO only).")


class NoCorrection(_Config):
    """No behaviour correction: only the PPO clip on rho = pi_theta / pi_old (DESIGN.md §4)."""

    type: Literal["none"] = "none"


class TruncatedIS(_Config):
    """Truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL Framework Secretly
    Brings You Off-Policy RL Training"; verl rollout IS): pg term weighted by min(pi_old/mu, cap)."""

    type: Literal["tis"] = "tis"
    cap: float = Field(2.0, ge=1, description="C in min(pi_old/mu, C) (verl's rollout_is_threshold "
                       "default 2.0). Tokens above C keep weight C, so they still train, with bounded variance.")


class MaskedIS(_Config):
    """Token masking (IcePop, Ling Team 2025, Ring-1T report; OpenRLHF 'icepop', prime-rl token
    masks): tokens whose pi_old/mu leaves [lower, upper] leave the pg numerator (they stay in T)."""

    type: Literal["mask"] = "mask"
    lower: float = Field(0.5, gt=0, le=1, description="Lower edge of the band (1/C with C = 2, DESIGN.md "
                         "§12; IcePop uses alpha = 0.5).")
    upper: float = Field(2.0, ge=1, description="Upper edge of the band (C = 2, DESIGN.md §12; IcePop "
                         "uses beta = 5, prime-rl's token mask 8).")
    weight_kept: bool = Field(True, description="Kept tokens carry the weight pi_old/mu (IcePop's "
                              "M(k) = k in band, OpenRLHF icepop); False: weight 1 (pure rejection, "
                              "verl's token RS mask without IS).")

    @model_validator(mode="after")
    def _band(self) -> MaskedIS:
        if self.lower >= self.upper:
            raise ValueError(f"need lower < upper, got [{self.lower}, {self.upper}]")
        return self


class DecoupledPPO(_Config):
    """Decoupled PPO (Hilton et al. 2021, arXiv:2110.00641; AReaL, Fu et al. 2025, arXiv:2505.24298):
    clip against the recomputed proximal policy, weight by pi_prox/mu (not differentiated)."""

    type: Literal["decoupled"] = "decoupled"
    cap: float | None = Field(
        5.0, gt=1, description="Tokens with pi_prox/mu > cap leave the pg numerator (stay in T): "
        "AReaL's long-standing default (behave_imp_weight_cap = 5, token-mask mode). None = the "
        "paper's uncapped weight.")


CorrectionConfig = Annotated[Union[NoCorrection, TruncatedIS, MaskedIS, DecoupledPPO],
                             Field(discriminator="type")]


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
    correction: CorrectionConfig = Field(
        default_factory=NoCorrection, description="Behaviour-policy correction of the pg term: "
        "'none', 'tis', 'mask' or 'decoupled' (learner.corrections). Any but 'none' needs the "
        "learner's old_logprobs='recompute' (pi_old = pi_prox) and the behaviour log-probs mu in the loss inputs.")


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


class GuardConfig(_Config):
    """Lag guard (issue 22): back to strict on-policy when entropy, behaviour mismatch or clipping
    says off-policy training goes wrong; forward again once they are healthy. Off by default.

    The rules, their exact conditions and why each default is what it is: ``learner.guard_rules``;
    the state machine (hold, hysteresis, events): ``learner.guard``. A threshold set to None turns
    its rule off.
    """

    enabled: bool = Field(False, description="Watch the metrics and switch modes (on in the "
                          "offpolicy_guarded preset).")
    entropy_floor: float | None = Field(
        None, ge=0, description="Absolute floor (nats) on entropy/mean; None = off (the scale depends "
        "on the model, so the relative floors below are the defaults).")
    entropy_floor_start_frac: float | None = Field(
        0.2, gt=0, lt=1, description="Floor = this fraction of the run's starting entropy (the run "
        "kept under 20% of what it started with: collapsed).")
    entropy_floor_target_frac: float | None = Field(
        0.5, gt=0, le=1, description="Floor = this fraction of the adaptive entropy target (0.5 x 0.2 "
        "= 0.1 nats for Skywork-OR1's target); off when the run has no target.")
    start_steps: int = Field(3, ge=1, description="Starting entropy (and clip fraction) = mean of "
                             "the first this many observed steps.")
    slope_window: int = Field(20, ge=3, description="Steps in the least-squares entropy slope.")
    slope_max_drop_frac: float | None = Field(
        0.01, gt=0, description="Fires when the entropy slope over the window is below -this x the "
        "starting entropy per step (1%/step: on that trend entropy reaches 0 within 100 steps).")
    mismatch_kl_max: float | None = Field(
        0.02, gt=0, description="Fires when the behaviour/learner mismatch KL (k3) exceeds this "
        "(k3 of a token at the clip edge rho = 1.2 is 0.018; prime-rl's bar for a sound model "
        "implementation is a mean < 0.015).")
    mismatch_keys: tuple[str, ...] = Field(
        ("mismatch/behaviour_kl_k3", "mismatch/start_kl_k3", "mismatch/kl_k3"), min_length=1,
        description="Metric read by the mismatch rule: the first one present in the step's row "
        "(behaviour vs the recomputed pi_old when the loss has both; else pi_old = behaviour and "
        "mismatch/start_kl_k3, the step's first update, before the learner moved, is that KL; the "
        "step mean mismatch/kl_k3 also holds the learner's own movement over N_SGD updates).")
    clip_frac_max: float | None = Field(
        0.05, gt=0, le=1, description="The clip rule fires when the clipped-token fraction exceeds "
        "max(this, clip_frac_growth x the run's starting clip fraction); None turns the rule off. "
        "(LLM GRPO runs clip well under 1% of tokens with one update per batch; 5% is a judgment call.)")
    clip_frac_growth: float | None = Field(
        2.0, gt=1, description="Relative part of the clip rule: the run's own starting clip fraction "
        "(mean of its first start_steps steps) times this; None = the absolute clip_frac_max alone. "
        "Reuse-4 clips 5-6% of tokens from its first, healthy steps: a rising clip fraction, not its "
        "designed level, is the alarm.")
    clip_key: Literal["clip/frac", "clip/high_frac", "clip/low_frac"] = Field(
        "clip/frac", description="Which clip fraction the clip rule reads (learner.lag.ratio_stats).")
    persist_steps: int = Field(
        2, ge=1, description="Level rules (entropy floor, mismatch, clip) fire only when their "
        "condition holds on each of the last this many steps (one noisy step does not switch).")
    hold_steps: int = Field(20, ge=1, description="On-policy steps after a fallback before a return "
                            "is considered.")
    recover_quiet_steps: int = Field(
        5, ge=1, description="Return to the configured off-policy mode only after this many "
        "consecutive steps on which no rule's condition holds (even for a single step).")

    @model_validator(mode="after")
    def _some_rule(self) -> GuardConfig:
        thresholds = (self.entropy_floor, self.entropy_floor_start_frac, self.entropy_floor_target_frac,
                      self.slope_max_drop_frac, self.mismatch_kl_max, self.clip_frac_max)
        if self.enabled and all(t is None for t in thresholds):
            raise ValueError("guard enabled with every rule off: set at least one threshold")
        return self


class PrimeConfig(_Config):
    """PRIME: implicit PRM, RLOO returns of process + outcome rewards, online prompt filter.

    Cui et al. 2025, "Process Reinforcement through Implicit Rewards", arXiv:2502.01456. Defaults
    are the reference implementation's (PRIME-RL/PRIME ``training/examples/run_prime_main.sh``
    and its verl port ``recipe/prime/config/prime_trainer.yaml``); see ``learner.prime``.
    """

    beta: float = Field(
        0.05, gt=0, description="beta in r_phi(y_t) = beta log(pi_phi / pi_ref) and in the PRM loss "
        "sigma(beta sum_t log(pi_phi / pi_ref)) (paper and scripts: 0.05).")
    filter_low: float = Field(
        0.2, ge=0, le=1, description="Online prompt filter: keep a prompt iff filter_low <= its "
        "accuracy over the K rollouts <= filter_high (PRIME: [0.2, 0.8]; with K = 4 that drops "
        "exactly the all-wrong and all-correct prompts, Sky-T1's rule). [0, 1] = off.")
    filter_high: float = Field(0.8, ge=0, le=1, description="Upper end of the filter band (inclusive).")
    process_coef: float = Field(
        5.0, ge=0, description="Weight of the RLOO process-reward term in the token rewards (verl "
        "recipe reward_dpo_coef = 5). Only the ratio to outcome_coef matters when whitening.")
    outcome_coef: float = Field(
        5.0, ge=0, description="Weight of the RLOO outcome-reward term (verl recipe reward_gt_coef = 5).")
    process_reward_norm: Literal["batch_norm", "none"] = Field(
        "batch_norm", description="'batch_norm' divides the process rewards of a rollout batch by "
        "max |sum_{s>=t} r_phi(y_s)| + 1e-6 so no process return exceeds 1 in magnitude "
        "(reference prime_norm default); 'none' keeps beta log-ratios as they are.")
    whiten_advantages: bool = Field(
        True, description="Advantages = returns whitened over every valid token of the rollout batch "
        "(mean 0, unit Bessel variance), as the reference's masked_whiten; False = raw returns.")
    prm_lr: float = Field(1e-6, gt=0, description="PRM AdamW learning rate (scripts: 1e-6, no weight decay).")
    prm_grad_clip: float = Field(10.0, gt=0, description="PRM gradient-norm clip (scripts: 10.0).")
    rewards_from: Literal["updated_prm", "pre_update_prm"] = Field(
        "updated_prm", description="Which PRM scores the process rewards of a batch: after its "
        "update on this batch (verl recipe update=before: a second forward) or the forward of the "
        "update itself (PRIME run script update=after: one forward, rewards of the old PRM).")

    @model_validator(mode="after")
    def _band(self) -> PrimeConfig:
        if self.filter_low > self.filter_high:
            raise ValueError(f"need filter_low <= filter_high, got {self.filter_low} > {self.filter_high}")
        return self
