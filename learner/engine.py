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

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

from learner.batching import MicroBatch, Row, collate, scatter_row_values
from learner.config import PolicyLossConfig
from learner.deepspeed_kit import (
    build_engine,
    cpu_state_dict,
    deepspeed_config,
    full_params,
    load_hf_model,
    optimizer_step,
    resolve_dtype,
    warmup_schedule,
    without_zero3_init,
    zero3_init_context,
)
from learner.errors import PolicyLagError
from learner.logprobs import logprobs_and_entropy
from learner.packing import attention_implementation
from learner.loss import PolicyLossInputs, deepspeed_loss_scale, policy_loss
from learner.reduce import reduce_metrics
from learner.trainer_config import LearnerConfig


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


def micro_batch_logprobs(model, mb: MicroBatch, device: torch.device, temperature: float,
                         chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of softmax(logits / tau) of a micro-batch's targets, (B, L) each in the padded
    layout whether the forward ran padded or packed (``mb.packed``: the model must read packed rows,
    ``learner.packing``)."""
    if mb.packed is not None:
        out = model(**mb.packed.model_kwargs(device), use_cache=False)                            # (1, N, V)
        logp, entropy = logprobs_and_entropy(out.logits, mb.packed.targets.to(device), temperature,
                                             chunk_size)                                          # (1, N) x2
        return mb.packed.unpack(logp), mb.packed.unpack(entropy)                                  # (B, L) x2
    out = model(input_ids=mb.input_ids.to(device), attention_mask=mb.attention_mask.to(device), use_cache=False)
    return logprobs_and_entropy(out.logits, mb.targets.to(device), temperature, chunk_size)      # (B, L) x2


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
        self._hf_ds = zero3_init_context(self.ds_config) if cfg.zero_stage == 3 else None
        # packed micro-batches need an attention that keeps the rows apart (the reference model's too)
        self.packed = cfg.packs_on(device)
        self.attention = attention_implementation(device) if self.packed else None
        model = load_hf_model(model_dir, dtype, cfg.gradient_checkpointing, self.attention)
        self.pad_id = int(model.config.pad_token_id or 0)
        self.vocab_size = int(model.config.vocab_size)
        self.engine, self.scheduler, self.optimizer_name = build_engine(
            model, cfg, self.ds_config, device, lr_scheduler=warmup_schedule(cfg.warmup_steps))
        self.model_dir, self.dtype = str(model_dir), dtype
        self.reference = None     # frozen initial policy for the k3 KL, loaded on first use

    # --- forward ------------------------------------------------------------------------------
    def _logprobs(self, model, mb: MicroBatch, loss_cfg: PolicyLossConfig,
                  temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        return micro_batch_logprobs(model, mb, self.device, temperature, loss_cfg.logprob_chunk_size)

    @torch.no_grad()
    def score_rows(self, rows: Sequence[Row], micro_batches: Sequence[Sequence[int]], loss_cfg: PolicyLossConfig,
                   temperature: float, which: str = "policy", what: str = "logp") -> dict[int, np.ndarray]:
        """Log-probs of the response tokens of ``rows`` under the current policy or the reference, or (``what``
        "entropy") the entropy of the full next-token distribution softmax(logits / temperature) at each.

        Every rank must get the same number of micro-batches (ZeRO-3 gathers in forward).
        """
        model = self.engine if which == "policy" else self._reference()
        out: dict[int, np.ndarray] = {}
        for idx in micro_batches:
            mb = collate(rows, idx, self.pad_id, self.packed)
            logp, entropy = self._logprobs(model, mb, loss_cfg, temperature)
            out |= scatter_row_values(mb, entropy if what == "entropy" else logp)
        return out

    def _reference(self):
        """The initial weights, frozen: a full copy on every rank (not ZeRO-partitioned, so under
        ZeRO-3 it costs a whole model per rank; the KL term is off by default)."""
        if self.reference is None:
            with without_zero3_init(self._hf_ds):
                self.reference = load_hf_model(self.model_dir, self.dtype, False, self.attention).to(self.device).eval()
            self.reference.requires_grad_(False)
        return self.reference

    # --- one optimizer update -----------------------------------------------------------------
    def _all_reduce_sum(self, *values: float) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def _lag_violations(self, mbs: Sequence[MicroBatch], required: int) -> tuple[int, str]:
        """(rows with loss tokens at lag != required, description) on this rank."""
        bad_rows, lags = [], []
        for mb in mbs:
            lag = self.version - mb.version_start                                # (B,)
            bad = mb.loss_mask.any(dim=1) & (lag != required)                    # (B,)
            bad_rows += mb.row_index[bad].tolist()
            lags += lag[bad].tolist()
        return len(bad_rows), f"rows {bad_rows} have lags {lags}"

    def train_update(self, rows: Sequence[Row], micro_batches: Sequence[Sequence[int]], version: int,
                     loss_cfg: PolicyLossConfig, temperature: float, entropy_coef: float,
                     required_lag: int | None) -> tuple[dict[str, float], dict[str, float]]:
        """One optimizer update over this rank's micro-batches of a mini-batch.

        ``required_lag``: the one update lag every row must have (0 strict on-policy, k fixed lag;
        None: any). Returns (loss metrics, summable across ranks like ``reduce_metrics``; info:
        grad norm before clipping and the lr this update used). An update without loss tokens is
        an error: the coordinator skips those (no optimizer step on a zero gradient, no version).
        """
        if version != self.version:
            raise RuntimeError(f"rank {self.rank} is at version {self.version}, coordinator expected {version}")
        mbs = [collate(rows, idx, self.pad_id, self.packed) for idx in micro_batches]
        n_bad, detail = self._lag_violations(mbs, required_lag) if required_lag is not None else (0, "")
        # one collective for T_global and the lag check, so every rank raises together (a rank
        # raising alone would leave the others blocked in the next collective)
        total_tokens, all_bad = self._all_reduce_sum(sum(mb.num_loss_tokens for mb in mbs), n_bad)
        if all_bad:
            raise PolicyLagError(f"learner version {self.version}: {int(all_bad)} rows would train at a lag "
                                 f"other than {required_lag} (rank {self.rank}: {detail})")
        if total_tokens == 0:
            raise RuntimeError(f"update at version {self.version} has no loss token: the coordinator skips "
                               "such updates (no optimizer step, no version)")
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
                behaviour_logprobs=_behaviour_or_none(mb, logp, loss_cfg),
                lag=self.version - mb.version_start)                             # (B,) per-lag-bucket metrics
            loss, m = policy_loss(inputs, loss_cfg, total_tokens, entropy_coef)
            self.engine.backward(loss * scale, scale_wrt_gas=False)
            metrics.append(m)
        norm, lr = optimizer_step(self.engine, self.cfg, self.device_kind)
        self.version += 1
        return reduce_metrics(metrics), {"grad/norm": norm, "lr": lr, "tokens/global": total_tokens}

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
        out = cpu_state_dict(self.engine.module, self.cfg.zero_stage)
        return out if self.rank == 0 else None
