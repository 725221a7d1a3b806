"""The DeepSpeed learner's full config: lag policy, batch sizes, optimizer, engine layout, math.

Composes the pure-math sub-configs of ``learner.config`` (batches, advantages, policy loss,
entropy control) with what only the distributed learner needs. Settings that the actors must
share (sampling temperature, group size, the per-stage response budget) are not here: the run
config owns them and hands them to the learner (``Learner(..., temperature=, group_size=)``;
each group carries the budget it was sampled with).

The lag policy (``learner.lag_policy``: on_policy, bounded:N, fixed:k; DESIGN.md §3) is checked here,
and only here (its ``lag_problems``), so a preset that claims to be on-policy but is not fails at
construction, before any engine starts. ``mode``, ``max_lag`` and ``fixed_lag`` are read-only views
of it; as input keys they are still folded into ``lag`` for one release.
"""

from __future__ import annotations

from typing import Any, Literal

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
from learner.lag_policy import LagPolicy, ModeName, OnPolicy, fold_legacy_keys, lag_error

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
    lag: LagPolicy = Field(
        default_factory=OnPolicy, description="The lag policy (learner.lag_policy; DESIGN.md §3): 'on_policy' "
        "(strict: every token at lag 0, N_reuse 1, D_T = D_R, eps_low = eps_high; violations raise PolicyLagError), "
        "'sync' (synchronous rollouts: each step's batch sampled by the version the step starts at, then any "
        "N_SGD updates, at update lags 0 .. N_SGD - 1), 'bounded:N' (off-policy: generation lag at a step's start <= N, staler responses dropped; the update lag "
        "lag/* reaches N + N_SGD - 1; clip-higher allowed) or 'fixed:k' (every token at update lag exactly k, one "
        "update per step; fixed:0 is strict on-policy). Saved as {\"kind\": ...}.")
    batch: BatchConfig = Field(default_factory=BatchConfig,
                               description="D_R, D_T, N_reuse: N_SGD = (D_R / D_T) * N_reuse updates per step.")
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
        16384, ge=1, description="Token budget of one micro-batch per rank (real tokens when packing, rows x "
        "padded length otherwise); a mini-batch is split into as many micro-batches as needed, with gradients "
        "accumulated and normalised by the global token count.")
    packing: Literal["auto", "on", "off"] = Field(
        "auto", description="'on': a micro-batch's rows go through the model end to end in one sequence, attention "
        "kept inside each row (learner.packing: flash-attn's varlen kernel on CUDA when installed, re-padded SDPA "
        "otherwise), so no compute goes to pad tokens; the loss, its normalisation and every metric are the "
        "padded path's. 'off': rows padded to the micro-batch's longest. 'auto': on with CUDA, off on CPU, where "
        "it is faster: on 2 CPU cores packing trained 1.08x faster at reasoning-like lengths (median a third of "
        "the budget) but 0.92x at the tiny world's (bench/learner_throughput.py): length-sorted micro-batches "
        "leave little padding, and the rows' re-padding for attention costs more than it saves on short rows.")
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

    @model_validator(mode="before")
    @classmethod
    def _old_lag_keys(cls, data: Any) -> Any:
        """mode / max_lag / fixed_lag (before ``lag``) folded into ``lag``, for one release."""
        return fold_legacy_keys(data)

    @model_validator(mode="after")
    def _validate(self) -> LearnerConfig:
        error = lag_error(self.lag, self.batch, self.loss, self.sync_interval, self.guard)
        if error:
            raise ValueError(error)
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
    def mode(self) -> ModeName:
        """'on_policy' (on_policy, fixed:0: every token at lag 0) or 'off_policy' (sync, bounded:N, fixed:k >= 1)."""
        return self.lag.mode

    @property
    def max_lag(self) -> int:
        """Bound on the generation lag at a step's start: N of bounded:N, k of fixed:k, 0 on-policy and sync."""
        return self.lag.max_lag

    @property
    def fixed_lag(self) -> int | None:
        """k of fixed:k (0 included), else None."""
        return self.lag.fixed_lag

    def packs_on(self, device: str) -> bool:
        """Whether micro-batches go through the model packed on ``device`` ("cpu" | "cuda"; ``packing``)."""
        return self.packing == "on" or (self.packing == "auto" and device == "cuda")

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
