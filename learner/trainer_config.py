"""The DeepSpeed learner's full config: mode, batch sizes, optimizer, engine layout, math.

Composes the pure-math sub-configs of ``learner.config`` (batches, advantages, policy loss,
entropy control) with what only the distributed learner needs. Settings that the actors must
share (sampling temperature, group size, the per-stage response budget) are not here: the run
config owns them and hands them to the learner (``Learner(..., temperature=, group_size=)``;
each group carries the budget it was sampled with).

Strict on-policy mode (DESIGN.md §3) is enforced here, and only here, so a preset that claims
to be on-policy but is not fails at construction, before any engine starts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.cluster.placement import CustomResources
from learner.config import (
    AdaptiveEntropy,
    AdvantageConfig,
    BatchConfig,
    EntropyConfig,
    GuardConfig,
    PolicyLossConfig,
    PrimeConfig,
)

# Fields that shape the DeepSpeed engines: a Learner may only reuse a rank group whose engines
# were built with the same values (everything else is per-call and may differ).
ENGINE_FIELDS = ("num_ranks", "zero_stage", "dtype", "device", "gradient_checkpointing", "lr",
                 "warmup_steps", "weight_decay", "betas", "adam_eps", "grad_clip", "optimizer",
                 "gpus_per_rank", "gpu_memory_fraction")
# Headroom a learner rank sharing a GPU leaves below its share by default: its CUDA context and
# communication buffers live outside torch's caching allocator, which the fraction caps.
SHARED_GPU_HEADROOM = 0.05


class LearnerConfig(BaseModel):
    """Everything the learner needs besides the buffer, the model dir and the weight transport."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # --- algorithm ---------------------------------------------------------------------------
    mode: Literal["on_policy", "off_policy"] = Field(
        "on_policy", description="'on_policy': strict, every token trained at lag 0 (N_reuse 1, "
        "D_T = D_R, eps_low = eps_high, max_lag 0; violations raise PolicyLagError). "
        "'off_policy': lag <= max_lag, N_reuse >= 1, clip-higher allowed (DESIGN.md §3).")
    batch: BatchConfig = Field(default_factory=BatchConfig,
                               description="D_R, D_T, N_reuse: N_SGD = (D_R / D_T) * N_reuse updates per step.")
    max_lag: int = Field(0, ge=0, description="Bound on the generation lag at the start of a step "
                         "(v0 - version_start, reported as lag_start/*): staler responses are dropped, "
                         "counted and dead-lettered with reason 'stale'. It does not bound the update lag "
                         "(lag/*, the lag at each optimizer update), which reaches max_lag + N_SGD - 1 "
                         "(reuse-4 with D_R/D_T 4 and max_lag 16: up to 31). 0 in on-policy mode.")
    fixed_lag: int | None = Field(
        None, ge=0, description="Lag as a controlled dose: every trained token has update lag exactly k. "
        "Actors generate step s with policy version s - k (the weight transport keeps the last k + 1 "
        "versions; only the Ray object store can), one update per step (N_reuse 1, D_T = D_R); groups "
        "sampled for a later step wait, staler ones are dropped. k = 0 is strict on-policy (mode "
        "'on_policy'); k >= 1 needs mode 'off_policy' with max_lag = k. None = off.")
    dynamic_sampling: bool = Field(
        True, description="DAPO dynamic sampling: ACK and discard zero-advantage groups and keep "
        "reading until D_R valid ones. Off: take exactly D_R groups; rejected groups stay in the "
        "schedule with an empty loss mask so N_SGD (and the version arithmetic actors rely on) "
        "stays fixed.")
    old_logprobs: Literal["behaviour", "recompute"] = Field(
        "behaviour", description="pi_old: the actors' behaviour log-probs, or the learner's own "
        "(no grad) with the weights at the start of the step (one extra forward pass).")
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig,
                                       description="GRPO advantage / truncation mask settings.")
    loss: PolicyLossConfig = Field(default_factory=PolicyLossConfig,
                                   description="Token-level clipped loss (eps_low/high, dual clip, k3 KL beta).")
    entropy: EntropyConfig = Field(default_factory=AdaptiveEntropy,
                                   description="Entropy coefficient: adaptive (Skywork-OR1), fixed, or none.")
    guard: GuardConfig = Field(default_factory=GuardConfig,
                               description="Lag guard: fall back to strict on-policy when entropy, mismatch or "
                               "clipping say off-policy training goes wrong (learner.guard; off by default).")
    prime: PrimeConfig | None = Field(
        None, description="PRIME (Cui et al. 2025; learner.prime, learner.prime_step): an implicit PRM trained "
        "online beside the policy, token advantages from its process rewards plus the outcome reward with RLOO "
        "baselines, and the online prompt filter at admission (replaces zero-advantage rejection and the "
        "advantage estimator). None = outcome-reward advantages only (advantage.estimator).")

    # --- optimizer ---------------------------------------------------------------------------
    lr: float = Field(1e-6, gt=0, description="AdamW peak learning rate (1e-6 in Skywork-OR1).")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up over this many optimizer "
                              "updates (lr * min(1, (u + 1) / warmup_steps)); 0 = constant lr.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2).")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    grad_clip: float = Field(1.0, ge=0, description="Clip the global grad norm of each full "
                             "mini-batch gradient to this value; 0 = off.")
    optimizer: Literal["auto", "torch_adamw", "deepspeed_fused_adam"] = Field(
        "auto", description="AdamW implementation (learner.optimizer): 'torch_adamw' = torch's (fused on CUDA, "
        "foreach on CPU); 'deepspeed_fused_adam' = DeepSpeed's FusedAdam, only if its op is prebuilt (never "
        "JIT-compiled); 'auto' = FusedAdam when prebuilt and on CUDA, else torch's. Same maths either way.")

    # --- engine layout -----------------------------------------------------------------------
    num_ranks: int = Field(1, ge=1, description="Data-parallel DeepSpeed ranks (one Ray actor each).")
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage 0-3.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto': cuda if the Ray cluster has GPUs, else cpu (gloo backend).")
    cpus_per_rank: float = Field(1.0, gt=0, description="Ray CPUs reserved per rank (sets torch threads on CPU).")
    gpus_per_rank: float = Field(
        1.0, gt=0, le=1, description="Ray GPUs reserved per rank when the learner is on CUDA (ignored on CPU). "
        "Below 1 an engine may share the rank's GPU (the one-GPU layout): the fraction is also the rank's share "
        "of the GPU's memory, and it needs num_ranks 1 (NCCL cannot run two ranks on one GPU).")
    gpu_memory_fraction: float | None = Field(
        None, gt=0, le=1, description="Cap on the GPU memory a rank's torch allocator may use "
        "(torch.cuda.set_per_process_memory_fraction), at most gpus_per_rank; None = gpus_per_rank - 0.05 "
        "when sharing a GPU (headroom for its CUDA context), no cap on a whole GPU.")
    resources: CustomResources = Field(
        default_factory=dict, description="Custom Ray resources of each rank's placement-group bundle, e.g. "
        "{\"train\": 1}: ranks go only to nodes started with them. {} = any node.")
    avoid_driver_node: bool = Field(
        True, description="In a Ray cluster of several nodes, never place a rank on the driver's node "
        "(a single-node Ray is unaffected).")
    dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="Training precision: 'auto' = bf16 on GPU, fp32 on CPU.")
    micro_batch_tokens: int = Field(
        16384, ge=1, description="Token budget of one micro-batch (rows x padded length, per "
        "rank); a mini-batch is split into as many micro-batches as needed, with gradients "
        "accumulated and normalised by the global token count.")
    gradient_checkpointing: bool = Field(False, description="HF activation checkpointing "
                                         "(recompute activations in backward; less memory, ~30% slower).")

    # --- weights, checkpoints, data ----------------------------------------------------------
    sync_interval: int | None = Field(
        None, ge=1, description="Also publish weights at every version divisible by this (mid-step, "
        "for in-flight actor updates); weights are always published after a step's last update. "
        "None = only at the end of each learner step.")
    checkpoint_every: int = Field(
        10, ge=0, description="Checkpoint every K learner steps (and at close). Groups are ACKed "
        "only once a checkpoint covering them is saved, so K trades checkpoint I/O against how "
        "much is retrained after a crash. 0 = no checkpoints; ACK right after each step.")
    keep_checkpoints: int = Field(2, ge=1, description="Newest checkpoints kept on disk.")
    checkpoint_dir: str | None = Field(
        None, description="Where checkpoints go: <checkpoint_dir>/<run_id>/checkpoints/ (None = the run "
        "directory's checkpoints/). With learner ranks on other nodes it must be shared storage that the "
        "driver and every learner node mount at the same path; a restarted learner resumes from it on any node.")
    consumer: str = Field("learner", min_length=1, description="Stable consumer name in the "
                          "groups consumer group; a restarted learner must reuse it to re-read "
                          "its pending (unACKed) groups.")
    block_ms: int = Field(1000, ge=1, description="How long one buffer read blocks waiting for groups.")
    data_timeout_s: float | None = Field(
        None, gt=0, description="Raise TimeoutError if a step cannot collect D_R valid groups "
        "within this many seconds; None = wait forever.")

    @model_validator(mode="after")
    def _validate(self) -> LearnerConfig:
        if self.mode == "on_policy":
            problems = strict_on_policy_problems(self)
            if problems:
                raise ValueError("mode='on_policy' is strict on-policy: " + "; ".join(problems))
            if self.guard.enabled:
                raise ValueError("guard.enabled watches an off-policy run to fall back to on-policy; "
                                 "this run is on-policy already")
        elif self.max_lag < 1:
            raise ValueError("mode='off_policy' needs max_lag >= 1 (use mode='on_policy' for lag 0)")
        if self.fixed_lag is not None:
            problems = fixed_lag_problems(self)
            if problems:
                raise ValueError(f"fixed_lag={self.fixed_lag}: " + "; ".join(problems))
        if self.loss.correction.type != "none" and self.old_logprobs != "recompute":
            raise ValueError(f"loss.correction '{self.loss.correction.type}' weights by pi_old/mu: it needs "
                             "old_logprobs='recompute' (with 'behaviour', pi_old = mu and the weight is 1)")
        if self.prime is not None and not self.dynamic_sampling:
            raise ValueError("prime's prompt filter drops out-of-band groups and reads on until D_R are in "
                             "band: it needs dynamic_sampling=True")
        problems = gpu_share_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        if self.dynamic_sampling and not self.advantage.reject_zero_advantage:
            raise ValueError("dynamic_sampling=True discards zero-advantage groups; it contradicts "
                             "advantage.reject_zero_advantage=False")
        return self

    @property
    def needs_reference(self) -> bool:
        return self.loss.kl_beta > 0

    @property
    def versions_needed(self) -> int:
        """How many of the newest policy versions actors must be able to load: k + 1 under a fixed
        lag k >= 1 (the weight transport keeps them), else 1."""
        return (self.fixed_lag or 0) + 1

    @property
    def shares_gpu(self) -> bool:
        """A rank may have engines on its GPU (it reserves less than a whole one)."""
        return self.gpus_per_rank < 1

    def memory_fraction(self) -> float | None:
        """The cap a CUDA rank puts on its allocator (``gpu_memory_fraction``), None = none."""
        if self.gpu_memory_fraction is not None:
            return self.gpu_memory_fraction
        return round(self.gpus_per_rank - SHARED_GPU_HEADROOM, 6) if self.shares_gpu else None

    def engine_signature(self) -> dict:
        """The fields a rank group's engines were built with (see ENGINE_FIELDS)."""
        return {k: getattr(self, k) for k in ENGINE_FIELDS}


def strict_on_policy_problems(cfg: LearnerConfig) -> list[str]:
    """Why ``cfg`` is not strict on-policy (DESIGN.md §3), or [] if it is.

    Every sample at lag 0: N_reuse = 1 and D_T = D_R (one update per rollout batch), max_lag 0,
    weights published once per step, and a symmetric clip eps_low = eps_high (0.2 in the paper;
    the value itself is the loss's choice, the symmetry is the mode's).
    """
    problems = []
    if cfg.batch.n_reuse != 1:
        problems.append(f"n_reuse={cfg.batch.n_reuse} (need 1)")
    if cfg.batch.mini_batch != cfg.batch.rollout_batch:
        problems.append(f"mini_batch={cfg.batch.mini_batch} != rollout_batch={cfg.batch.rollout_batch}")
    if cfg.loss.eps_low != cfg.loss.eps_high:
        problems.append(f"eps_low={cfg.loss.eps_low} != eps_high={cfg.loss.eps_high}")
    if cfg.max_lag != 0:
        problems.append(f"max_lag={cfg.max_lag} (need 0)")
    if cfg.sync_interval not in (None, 1):
        problems.append(f"sync_interval={cfg.sync_interval} (need None or 1: actors generate batch s "
                        "with version s weights)")
    return problems


def fixed_lag_problems(cfg: LearnerConfig) -> list[str]:
    """Why ``cfg`` cannot train every token at update lag exactly ``cfg.fixed_lag`` = k, or [].

    One update per step (so the step's data is not reused at k + 1, k + 2, ...), weights published
    once per step, no guard (it would switch the lag), and a mode and max_lag that say k: on-policy
    for k = 0, off-policy with max_lag = k for k >= 1 (admission and the feeder's clock read max_lag).
    """
    k, problems = cfg.fixed_lag, []
    if cfg.batch.n_reuse != 1 or cfg.batch.mini_batch != cfg.batch.rollout_batch:
        problems.append(f"needs one update per step: --learner.batch.n_reuse 1 and --learner.batch.mini_batch "
                        f"{cfg.batch.rollout_batch} (= rollout_batch; got n_reuse {cfg.batch.n_reuse}, "
                        f"mini_batch {cfg.batch.mini_batch})")
    if cfg.sync_interval not in (None, 1):
        problems.append(f"sync_interval={cfg.sync_interval}: weights are published once per step (None)")
    if cfg.guard.enabled:
        problems.append("the lag guard switches the lag itself: turn --learner.guard.enabled off")
    if k == 0 and cfg.mode != "on_policy":
        problems.append("lag 0 is strict on-policy: --learner.mode on_policy --learner.max_lag 0")
    if k and (cfg.mode != "off_policy" or cfg.max_lag != k):
        problems.append(f"needs --learner.mode off_policy --learner.max_lag {k} (got mode {cfg.mode}, "
                        f"max_lag {cfg.max_lag})")
    return problems


def gpu_share_problems(cfg: LearnerConfig) -> list[str]:
    """Why ``cfg``'s GPU reservation cannot work (ignored when the learner is set to CPU), or []."""
    if cfg.device == "cpu":
        return []
    problems = []
    if cfg.shares_gpu and cfg.num_ranks > 1:
        problems.append(f"gpus_per_rank={cfg.gpus_per_rank:g} with num_ranks={cfg.num_ranks}: ranks on fractions of "
                        "GPUs may land on the same GPU, and NCCL cannot run two ranks on one GPU; use "
                        "--learner.num_ranks 1 to share a GPU with engines, or --learner.gpus_per_rank 1")
    if cfg.gpu_memory_fraction is not None and cfg.gpu_memory_fraction > cfg.gpus_per_rank:
        problems.append(f"gpu_memory_fraction={cfg.gpu_memory_fraction:g} exceeds gpus_per_rank={cfg.gpus_per_rank:g}: "
                        "a rank's memory share is at most the GPU fraction it reserves (engines packed on the same "
                        "GPU size theirs the same way); set --learner.gpu_memory_fraction "
                        f"{cfg.gpus_per_rank:g} or less")
    if cfg.shares_gpu and cfg.memory_fraction() is not None and cfg.memory_fraction() <= 0:
        problems.append(f"gpus_per_rank={cfg.gpus_per_rank:g} leaves no memory after the "
                        f"{SHARED_GPU_HEADROOM:g} headroom: raise it or set --learner.gpu_memory_fraction")
    return problems
