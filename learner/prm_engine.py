"""PRIME's implicit PRM on one learner rank: a second DeepSpeed engine beside the policy's.

Cui et al. 2025 (arXiv:2502.01456), DESIGN.md §12. The PRM pi_phi starts from the run's model
dir (the SFT policy, also the frozen reference), has its own AdamW (``PrimeConfig.prm_lr``,
``prm_grad_clip``, no weight decay, as the reference scripts) and its own checkpoint
(``learner.checkpoint.save_rank`` into ``<checkpoint>/prm/``). It is trained once per rollout
batch, before the policy update, with PRIME's cross-entropy loss (``learner.prime.prm_loss``) on
the outcome labels, and scores responses at temperature 1 (the reference implementation does).

Gradient bookkeeping is the policy engine's (``learner.engine``, ``learner.deepspeed_kit``): every micro-batch loss is
sum_i BCE_i / N_global with N_global = the responses of the whole update on all ranks (the
coordinator counts them), the accumulation boundary is set by hand, and the loss is scaled by
the world size so DeepSpeed's gradient average becomes the exact sum. One update is therefore
the same whatever the micro-batch or rank split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from learner import deepspeed_kit as kit
from learner.batching import MicroBatch, Row, collate, scatter_row_values
from learner.config import PrimeConfig
from learner.logprobs import logprobs_and_entropy
from learner.loss import deepspeed_loss_scale
from learner.prime import PRM_TEMPERATURE, outcome_labels, prm_loss
from learner.trainer_config import LearnerConfig


def prm_engine_config(cfg: LearnerConfig, prime: PrimeConfig) -> LearnerConfig:
    """The learner's engine layout (ranks, ZeRO, dtype, token budget) with the PRM's optimizer."""
    return cfg.model_copy(update={"lr": prime.prm_lr, "grad_clip": prime.prm_grad_clip, "weight_decay": 0.0,
                                  "warmup_steps": 0})


def prm_signature(cfg: LearnerConfig, prime: PrimeConfig) -> dict:
    """What a built PRM engine depends on: a rank keeps its PRM only while this stays the same."""
    return {**cfg.engine_signature(), "prm_lr": prime.prm_lr, "prm_grad_clip": prime.prm_grad_clip}


def place_row_values(mb: MicroBatch, values: dict[int, np.ndarray], like: torch.Tensor) -> torch.Tensor:
    """Per-row (R,) arrays -> (B, L) aligned with ``mb``'s loss mask (inverse of ``scatter_row_values``)."""
    out = torch.zeros_like(like)
    rows = [int(i) for i in mb.row_index if int(i) >= 0]
    if rows:
        flat = torch.from_numpy(np.concatenate([values[i] for i in rows])).to(out)
        out[mb.loss_mask.to(out.device)] = flat      # row-major: row b's span, in order, then row b + 1
    return out


class PrmEngine:
    """The implicit PRM of one rank (module docstring). ``version`` counts its optimizer updates."""

    def __init__(self, cfg: LearnerConfig, prime: PrimeConfig, model_dir: str | Path, rank: int, world: int,
                 device: str, group_size: int):
        self.cfg = prm_engine_config(cfg, prime)
        self.signature = prm_signature(cfg, prime)
        self.rank, self.world, self.device_kind = rank, world, device
        self.device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.version = 0
        self.ds_config = kit.deepspeed_config(self.cfg, world, device, group_size)
        model = kit.load_hf_model(model_dir, kit.resolve_dtype(self.cfg, device), self.cfg.gradient_checkpointing)
        self.pad_id = int(model.config.pad_token_id or 0)
        self.engine, _, self.optimizer_name = kit.build_engine(model, self.cfg, self.ds_config, device)

    def _logprobs(self, mb: MicroBatch, chunk: int) -> torch.Tensor:
        out = self.engine(input_ids=mb.input_ids.to(self.device), attention_mask=mb.attention_mask.to(self.device),
                          use_cache=False)
        return logprobs_and_entropy(out.logits, mb.targets.to(self.device), PRM_TEMPERATURE, chunk)[0]  # (B, L)

    def update(self, rows: Sequence[Row], micro_batches: Sequence[Sequence[int]], ref: dict[int, np.ndarray],
               num_responses: int, beta: float, chunk: int) -> tuple[dict[int, np.ndarray], dict[str, float]]:
        """One PRM optimizer update on this rank's micro-batches of the rollout batch.

        ``ref``: the frozen reference's log-probs (temperature 1) of every row; ``num_responses``:
        rows in the update on all ranks. Returns (the PRM's log-probs of this rank's rows from the
        update's own forward, i.e. before the update: the held-out view; info: grad norm, lr).
        """
        scale = deepspeed_loss_scale(1, self.world, scale_wrt_gas=False)
        self.engine.train()
        before: dict[int, np.ndarray] = {}
        for i, idx in enumerate(micro_batches):
            self.engine.set_gradient_accumulation_boundary(i == len(micro_batches) - 1)
            mb = collate(rows, idx, self.pad_id)
            logp = self._logprobs(mb, chunk)                                                      # (B, L)
            if idx:
                labels = outcome_labels(torch.tensor([rows[j].reward for j in idx], dtype=torch.float64))
                loss, _ = prm_loss(logp, place_row_values(mb, ref, logp.detach()), mb.loss_mask.to(self.device),
                                   labels.to(self.device), beta, num_responses=num_responses)
            else:   # a dummy micro-batch: no response, but ZeRO's collectives need its backward
                loss = logp.sum() * 0.0
            self.engine.backward(loss * scale, scale_wrt_gas=False)
            before |= scatter_row_values(mb, logp)
        norm, lr = kit.optimizer_step(self.engine, self.cfg, self.device_kind)     # clipped to prm_grad_clip
        self.version += 1
        return before, {"prm/grad_norm": norm, "prm/lr": lr}

    @torch.no_grad()
    def score(self, rows: Sequence[Row], micro_batches: Sequence[Sequence[int]], chunk: int) -> dict[int, np.ndarray]:
        """The PRM's log-probs (temperature 1) of the response tokens of ``rows[micro_batches]``."""
        out: dict[int, np.ndarray] = {}
        for idx in micro_batches:
            mb = collate(rows, idx, self.pad_id)
            out |= scatter_row_values(mb, self._logprobs(mb, chunk))
        return out

    def iter_full_params(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) per parameter; a collective under ZeRO-3 (all ranks iterate)."""
        return kit.full_params(self.engine.module, self.cfg.zero_stage)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """CPU copies of all PRM parameters on rank 0 (None elsewhere); checkpoints and tests."""
        out = kit.cpu_state_dict(self.engine.module, self.cfg.zero_stage)
        return out if self.rank == 0 else None
