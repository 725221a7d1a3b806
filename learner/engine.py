"""One DeepSpeed rank: model from an HF dir, token-level PPO updates, scoring, full weights.

Gradient bookkeeping (the part that must be exactly right for 1 rank == N ranks):

* every micro-batch loss is ``sum_tokens / T_global`` with T_global = loss tokens of the whole
  mini-batch, all-reduced over ranks, so the micro-batch losses of all ranks add up to the
  mini-batch loss;
* the number of micro-batches varies per mini-batch (token budget), so the accumulation
  boundary is set by hand (``set_gradient_accumulation_boundary``) instead of DeepSpeed's
  fixed ``gradient_accumulation_steps`` counter, and ``backward(..., scale_wrt_gas=False)``
  keeps DeepSpeed from dividing by that counter;
* DeepSpeed averages gradients over the data-parallel world, so each loss is multiplied by
  the world size (``deepspeed_loss_scale(1, world, scale_wrt_gas=False)``) and the reduced
  gradient is the *sum*, i.e. the exact full mini-batch gradient that grad clipping sees.

The engine knows nothing about buffers, groups or modes: rows and micro-batch plans come
from the coordinator (``learner.loop``), the loss config and entropy coefficient per call.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import deepspeed
import numpy as np
import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import LambdaLR

from learner.batching import MicroBatch, Row, collate, scatter_row_values
from learner.config import PolicyLossConfig
from learner.errors import PolicyLagError
from learner.logprobs import logprobs_and_entropy
from learner.loss import PolicyLossInputs, deepspeed_loss_scale, policy_loss
from learner.optimizer import initialize_engine
from learner.reduce import reduce_metrics
from learner.trainer_config import LearnerConfig

_NOMINAL_ROW_TOKENS = 1024  # row length guess for DeepSpeed's bookkeeping batch sizes only


def _ref_or_none(mb: MicroBatch, logp: torch.Tensor) -> torch.Tensor:
    """Reference log-probs on the device; a dummy micro-batch has none (its mask is empty)."""
    return torch.zeros_like(logp) if mb.ref_logprobs is None else mb.ref_logprobs.to(logp.device)


def _behaviour_or_none(mb: MicroBatch, logp: torch.Tensor, loss_cfg: PolicyLossConfig) -> torch.Tensor | None:
    """mu, the actors' log-probs, once pi_old was recomputed (the corrections and the behaviour-
    mismatch metrics); a dummy micro-batch (empty mask) of a corrected loss gets zeros."""
    if mb.behaviour_logprobs is not None:
        return mb.behaviour_logprobs.to(logp.device)
    if loss_cfg.correction.type != "none" and not mb.num_loss_tokens:
        return torch.zeros_like(logp.detach())
    return None


class LinearWarmup:
    """lr factor min(1, (u + 1) / warmup) for update u (a class so LambdaLR can checkpoint it)."""

    def __init__(self, warmup_steps: int):
        self.warmup_steps = warmup_steps

    def __call__(self, update: int) -> float:
        return 1.0 if self.warmup_steps <= 0 else min(1.0, (update + 1) / self.warmup_steps)


def resolve_dtype(cfg: LearnerConfig, device: str) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return torch.bfloat16 if cfg.dtype == "bf16" else torch.float32


def nominal_micro_batching(cfg: LearnerConfig, world: int, group_size: int) -> tuple[int, int]:
    """(micro-batch rows, accumulation steps) DeepSpeed's config insists on.

    Only bookkeeping (``train_batch_size`` = rows * gas * world): the real split is by token
    budget per mini-batch with a hand-set accumulation boundary (module docstring).
    """
    rows_per_rank = max(1, math.ceil(cfg.batch.mini_batch * group_size / world))
    mbs = min(rows_per_rank, max(1, cfg.micro_batch_tokens // _NOMINAL_ROW_TOKENS))
    return mbs, math.ceil(rows_per_rank / mbs)


def clips_itself(cfg: LearnerConfig, device: str) -> bool:
    """ZeRO-0 in fp32: DeepSpeed clips with torch's formula but does not report the norm, so the
    engine clips (``clip_grad_norm_``, one pass that also returns the norm) instead."""
    return cfg.zero_stage == 0 and resolve_dtype(cfg, device) == torch.float32


def deepspeed_config(cfg: LearnerConfig, world: int, device: str, group_size: int) -> dict:
    mbs, gas = nominal_micro_batching(cfg, world, group_size)
    bf16 = resolve_dtype(cfg, device) == torch.bfloat16
    zero: dict = {"stage": cfg.zero_stage}
    if cfg.zero_stage >= 2:
        zero |= {"overlap_comm": device == "cuda", "contiguous_gradients": True}
    return {
        "train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": gas,
        "train_batch_size": mbs * gas * world,
        "gradient_clipping": 0.0 if clips_itself(cfg, device) else cfg.grad_clip,
        "zero_optimization": zero, "bf16": {"enabled": bf16}, "fp16": {"enabled": False},
        # no optimizer section: learner.optimizer.initialize_engine picks it (never a JIT-built op)
        "zero_allow_untested_optimizer": True, "steps_per_print": 10**12, "wall_clock_breakdown": False,
    }


def _load_hf_model(model_dir: str | Path, dtype: torch.dtype, gradient_checkpointing: bool):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    model.config.use_cache = False
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _zero3_init_context(ds_config: dict):
    """Under ZeRO-3, make ``from_pretrained`` build the model already partitioned (zero.Init).

    transformers does that while an ``HfDeepSpeedConfig`` is alive, which needs ``accelerate``.
    Without it the full model is loaded on every rank (host memory) and ``deepspeed.initialize``
    partitions it: same result, higher transient host-memory peak.
    """
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return None
    from transformers.integrations import HfDeepSpeedConfig
    return HfDeepSpeedConfig(ds_config)


@contextmanager
def without_zero3_init(hf_ds_config):
    """``from_pretrained`` of a whole, unpartitioned model while the policy's ``HfDeepSpeedConfig``
    (ZeRO-3) is alive: transformers would otherwise build it under ``zero.Init``, partitioned, and
    the frozen reference is used as a plain module, never through a DeepSpeed engine."""
    from transformers.integrations.deepspeed import set_hf_deepspeed_config, unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if hf_ds_config is not None:
            set_hf_deepspeed_config(hf_ds_config)


def full_params(module: torch.nn.Module, zero_stage: int) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) per unique parameter of a DeepSpeed module; under ZeRO-3 each is
    gathered in turn (a collective: every rank must iterate), so peak memory is one parameter."""
    for name, p in module.named_parameters():
        if zero_stage == 3:
            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                yield name, p.data.detach().clone()
        else:
            yield name, p.data.detach()


class RankEngine:
    """A DeepSpeed engine plus the learner's update/scoring/publishing logic for one rank."""

    def __init__(self, cfg: LearnerConfig, model_dir: str | Path, rank: int, world: int, device: str,
                 group_size: int, seed: int = 0):
        self.cfg, self.rank, self.world, self.device_kind = cfg, rank, world, device
        self.device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.version = 0
        torch.manual_seed(seed)
        dtype = resolve_dtype(cfg, device)
        self.ds_config = deepspeed_config(cfg, world, device, group_size)
        self._hf_ds = _zero3_init_context(self.ds_config) if cfg.zero_stage == 3 else None
        model = _load_hf_model(model_dir, dtype, cfg.gradient_checkpointing)
        self.pad_id = int(model.config.pad_token_id or 0)
        self.vocab_size = int(model.config.vocab_size)
        self.engine, self.scheduler, self.optimizer_name = initialize_engine(
            model, cfg, self.ds_config, device, lr_scheduler=lambda opt: LambdaLR(opt, LinearWarmup(cfg.warmup_steps)))
        self.model_dir, self.dtype = str(model_dir), dtype
        self.reference = None     # frozen initial policy for the k3 KL, loaded on first use

    # --- forward ------------------------------------------------------------------------------
    def _logprobs(self, model, mb: MicroBatch, loss_cfg: PolicyLossConfig,
                  temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of softmax(logits / tau) (chunking from the loss config)."""
        out = model(input_ids=mb.input_ids.to(self.device), attention_mask=mb.attention_mask.to(self.device),
                    use_cache=False)
        return logprobs_and_entropy(out.logits, mb.targets.to(self.device), temperature,  # (B, L) x2
                                    loss_cfg.logprob_chunk_size)

    @torch.no_grad()
    def score_rows(self, rows: Sequence[Row], micro_batches: Sequence[Sequence[int]], loss_cfg: PolicyLossConfig,
                   temperature: float, which: str = "policy") -> dict[int, np.ndarray]:
        """Log-probs of the response tokens of ``rows`` under the current policy or the reference.

        Every rank must get the same number of micro-batches (ZeRO-3 gathers in forward).
        """
        model = self.engine if which == "policy" else self._reference()
        out: dict[int, np.ndarray] = {}
        for idx in micro_batches:
            mb = collate(rows, idx, self.pad_id)
            logp, _ = self._logprobs(model, mb, loss_cfg, temperature)
            out |= scatter_row_values(mb, logp)
        return out

    def _reference(self):
        """The initial weights, frozen: a full copy on every rank (not ZeRO-partitioned, so under
        ZeRO-3 it costs a whole model per rank; the KL term is off by default)."""
        if self.reference is None:
            with without_zero3_init(self._hf_ds):
                self.reference = _load_hf_model(self.model_dir, self.dtype, False).to(self.device).eval()
            self.reference.requires_grad_(False)
        return self.reference

    # --- one optimizer update -----------------------------------------------------------------
    def _all_reduce_sum(self, *values: float) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def _lag_violations(self, mbs: Sequence[MicroBatch]) -> tuple[int, str]:
        """(rows with loss tokens at lag != 0, description) on this rank."""
        bad_rows, lags = [], []
        for mb in mbs:
            lag = self.version - mb.version_start                                # (B,)
            bad = mb.loss_mask.any(dim=1) & (lag != 0)                           # (B,)
            bad_rows += mb.row_index[bad].tolist()
            lags += lag[bad].tolist()
        return len(bad_rows), f"rows {bad_rows} have lags {lags}"

    def train_update(self, rows: Sequence[Row], micro_batches: Sequence[Sequence[int]], version: int,
                     loss_cfg: PolicyLossConfig, temperature: float, entropy_coef: float,
                     require_lag0: bool) -> tuple[dict[str, float], dict[str, float]]:
        """One optimizer update over this rank's micro-batches of a mini-batch.

        Returns (loss metrics, summable across ranks like ``reduce_metrics``; info: grad norm
        before clipping and the lr this update used).
        """
        if version != self.version:
            raise RuntimeError(f"rank {self.rank} is at version {self.version}, coordinator expected {version}")
        mbs = [collate(rows, idx, self.pad_id) for idx in micro_batches]
        n_bad, detail = self._lag_violations(mbs) if require_lag0 else (0, "")
        # one collective for T_global and the lag check, so every rank raises together (a rank
        # raising alone would leave the others blocked in the next collective)
        total_tokens, all_bad = self._all_reduce_sum(sum(mb.num_loss_tokens for mb in mbs), n_bad)
        if all_bad:
            raise PolicyLagError(f"strict on-policy, learner version {self.version}: {int(all_bad)} rows "
                                 f"would train at lag != 0 (rank {self.rank}: {detail})")
        scale = deepspeed_loss_scale(1, self.world, scale_wrt_gas=False)
        need_ref = loss_cfg.kl_beta > 0
        if need_ref and any(mb.ref_logprobs is None for mb in mbs if mb.num_loss_tokens):
            raise RuntimeError("kl_beta > 0 but rows carry no reference log-probs")
        self.engine.train()
        metrics = []
        for i, mb in enumerate(mbs):
            self.engine.set_gradient_accumulation_boundary(i == len(mbs) - 1)
            logp, ent = self._logprobs(self.engine, mb, loss_cfg, temperature)   # (B, L) x2
            d = self.device
            inputs = PolicyLossInputs(
                logprobs=logp, old_logprobs=mb.old_logprobs.to(d), advantages=mb.advantages.to(d),
                loss_mask=mb.loss_mask.to(d), entropy=ent if entropy_coef else ent.detach(),
                ref_logprobs=_ref_or_none(mb, logp) if need_ref else None,
                behaviour_logprobs=_behaviour_or_none(mb, logp, loss_cfg))
            loss, m = policy_loss(inputs, loss_cfg, total_tokens, entropy_coef)
            self.engine.backward(loss * scale, scale_wrt_gas=False)
            metrics.append(m)
        own_norm = self._clip_stage0()
        lr = float(self.engine.optimizer.param_groups[0]["lr"])
        self.engine.step()
        self.version += 1
        norm = own_norm if own_norm is not None else self.engine.get_global_grad_norm()
        info = {"grad/norm": float("nan") if norm is None else float(norm), "lr": lr,
                "tokens/global": total_tokens}
        return reduce_metrics(metrics), info

    def _clip_stage0(self) -> float | None:
        """ZeRO-0 fp32 (see ``clips_itself``): clip to grad_clip, return the pre-clip global norm.

        The gradients are already all-reduced at this point (boundary backward), so the local
        norm is the global one. Other setups: None (DeepSpeed clips and records the norm).
        """
        if not clips_itself(self.cfg, self.device_kind):
            return None
        params = [p for p in self.engine.module.parameters() if p.grad is not None]
        if not params:
            return 0.0
        if self.cfg.grad_clip > 0:
            return float(torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip))
        return float(torch.nn.utils.get_total_norm([p.grad for p in params]))

    # --- full weights ---------------------------------------------------------------------------
    def iter_full_params(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) per unique parameter; a collective under ZeRO-3 (all ranks iterate)."""
        return full_params(self.engine.module, self.cfg.zero_stage)

    def weights(self):
        """This rank's weights as the transport reads them (bucket by bucket; gathered under ZeRO-3)."""
        from learner.weight_source import EngineWeights

        return EngineWeights(self.engine.module, self.rank, self.cfg.zero_stage == 3)

    def publish(self, transport, version: int) -> str | None:
        """Every rank hands its weights to the transport (rank 0 sends, the others join the gathers);
        rank 0's answer is the location."""
        if version != self.version:
            raise RuntimeError(f"publish of version {version} but rank {self.rank} is at {self.version}")
        return transport.publish(self.weights(), version)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """CPU copies of all parameters on rank 0 (None elsewhere); for checkpoints and tests."""
        out = {n: t.to("cpu", copy=True) for n, t in self.iter_full_params()}
        return out if self.rank == 0 else None
