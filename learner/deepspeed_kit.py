"""The DeepSpeed toolkit: every DeepSpeed engine of the project is set up and stepped through these.

Users: the policy (``learner.engine.RankEngine``), PRIME's implicit PRM (``learner.prm_engine``), the
SFT stage (``launch.recipes.sft.train``) and the learner benchmark (``bench/learner_throughput.py``).

    set_rendezvous / init_distributed   torch.distributed through DeepSpeed (gloo on CPU, NCCL on CUDA)
    load_hf_model                       an HF causal LM for training (no KV cache, optional checkpointing)
    deepspeed_config                    the engine layout: nominal batch sizes, ZeRO, dtype, clipping
    build_engine                        ``deepspeed.initialize``: the one place an engine and its optimizer
                                        are built (the optimizer ``learner.optimizer`` chooses)
    optimizer_step                      one optimizer step with the global grad norm clipped; (norm, lr)
    full_params / cpu_state_dict        full weights out of an engine (gathered bucket by bucket under ZeRO-3)

Gradient bookkeeping shared by all users: every micro-batch loss is ``sum / N_global`` (N_global all
ranks' loss tokens or responses of the update), the accumulation boundary is set by hand
(``set_gradient_accumulation_boundary``) and the loss is scaled by the world size
(``learner.loss.deepspeed_loss_scale``), so DeepSpeed's gradient average becomes the exact sum that
clipping sees (``learner.engine``'s docstring).

Nothing here compiles an op at run time: the CPU comm backend's shared-memory op is never built
(:func:`init_distributed`), and DeepSpeed's FusedAdam is used only when prebuilt (``learner.optimizer``).
"""

from __future__ import annotations

import math
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from learner.optimizer import OptimizerName, fused_adam_section, resolve_optimizer, torch_adamw
from learner.trainer_config import LearnerConfig

NOMINAL_ROW_TOKENS = 1024  # row length guess for DeepSpeed's bookkeeping batch sizes only
SHM_COMM_OP = "deepspeed_shm_comm"


# --- processes --------------------------------------------------------------------------------------
def set_rendezvous(addr: str, port: int, rank: int, world: int, local_rank: int) -> None:
    """The env:// rendezvous of ``init_distributed`` (what ``torchrun`` / ``deepspeed`` launchers set).

    LOCAL_SIZE stays unset on purpose: with LOCAL_SIZE == WORLD_SIZE DeepSpeed's CPU backend maps a
    69 MB /dev/shm workspace per rank for inference_all_reduce (unused in training) and never unlinks
    it. LOCAL_RANK suffices for device placement.
    """
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(local_rank))
    os.environ.pop("LOCAL_SIZE", None)


def skip_shm_comm_op() -> None:
    """Make DeepSpeed's CPU comm backend skip (never build) its shared-memory op in this process.

    On CPU the backend JIT-builds ``deepspeed_shm_comm`` (a C++ extension, 1-2 min on 2 cores) the
    first time a process initialises it. It serves only ``inference_all_reduce`` (DeepSpeed-Inference
    tensor parallelism); training's collectives go through torch.distributed (gloo) either way. torch's
    extension cache keys the build by its command line, so two kinds of processes (a Ray learner rank,
    a plain SFT process) rebuilt it in turn, again and again. Marking the op incompatible in
    DeepSpeed's own record (``deepspeed.ops.__compatible_ops__``, a cached dict edited in place) makes
    the backend skip it: nothing is compiled, the gradients are the same. The CUDA accelerator has no
    such builder.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False


def init_distributed(device: str) -> tuple[int, int]:
    """torch.distributed through DeepSpeed, NCCL on 'cuda' and gloo on 'cpu'; (rank, world size).

    Reads the rendezvous from the environment; a process run plainly (no launcher set one) is one
    rank on a free loopback port. No op is built (:func:`skip_shm_comm_op`).
    """
    if "WORLD_SIZE" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        set_rendezvous("127.0.0.1", port, 0, 1, 0)
    import deepspeed

    if device != "cuda":
        skip_shm_comm_op()
    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo", auto_mpi_discovery=False,
                               verbose=False)
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


# --- the model ---------------------------------------------------------------------------------------
def resolve_dtype(cfg: LearnerConfig, device: str) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return torch.bfloat16 if cfg.dtype == "bf16" else torch.float32


def load_hf_model(model_dir: str | Path, dtype: torch.dtype, gradient_checkpointing: bool,
                  attention: str | None = None):
    """An HF causal LM to train: no KV cache, activation checkpointing when asked (non-reentrant);
    ``attention``: an attention implementation (``learner.packing.attention_implementation`` for packed
    micro-batches; None = transformers' default)."""
    from transformers import AutoModelForCausalLM

    kwargs = {} if attention is None else {"attn_implementation": attention}
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, **kwargs)
    model.config.use_cache = False
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def zero3_init_context(ds_config: dict):
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


# --- the engine --------------------------------------------------------------------------------------
class LinearWarmup:
    """lr factor min(1, (u + 1) / warmup) for update u (a class so LambdaLR can checkpoint it)."""

    def __init__(self, warmup_steps: int):
        self.warmup_steps = warmup_steps

    def __call__(self, update: int) -> float:
        return 1.0 if self.warmup_steps <= 0 else min(1.0, (update + 1) / self.warmup_steps)


def warmup_schedule(warmup_steps: int) -> Callable:
    """``build_engine``'s lr_scheduler argument: a LambdaLR of :class:`LinearWarmup` on the optimizer."""
    from torch.optim.lr_scheduler import LambdaLR

    return lambda optimizer: LambdaLR(optimizer, LinearWarmup(warmup_steps))


def nominal_micro_batching(cfg: LearnerConfig, world: int, group_size: int) -> tuple[int, int]:
    """(micro-batch rows, accumulation steps) DeepSpeed's config insists on.

    Only bookkeeping (``train_batch_size`` = rows * gas * world): the real split is by token
    budget per mini-batch with a hand-set accumulation boundary (module docstring).
    """
    rows_per_rank = max(1, math.ceil(cfg.batch.mini_batch * group_size / world))
    mbs = min(rows_per_rank, max(1, cfg.micro_batch_tokens // NOMINAL_ROW_TOKENS))
    return mbs, math.ceil(rows_per_rank / mbs)


def clips_itself(cfg: LearnerConfig, device: str) -> bool:
    """ZeRO-0 in fp32: DeepSpeed clips with torch's formula but does not report the norm, so
    :func:`optimizer_step` clips (``clip_grad_norm_``, one pass that also returns the norm) instead."""
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
        # no optimizer section: build_engine adds the one learner.optimizer picks (never a JIT-built op)
        "zero_allow_untested_optimizer": True, "steps_per_print": 10**12, "wall_clock_breakdown": False,
    }


def build_engine(model, cfg: LearnerConfig, ds_config: dict, device: str,
                 lr_scheduler: Callable | None = None) -> tuple[Any, Any, OptimizerName]:
    """``deepspeed.initialize`` of ``model``'s trainable parameters; (engine, lr scheduler or None,
    the optimizer's name).

    The one place an engine and its optimizer are built: the AdamW of ``cfg`` (``lr``, ``betas``,
    ``adam_eps``, ``weight_decay``) in the implementation ``cfg.optimizer`` resolves to on ``device``
    (``learner.optimizer``): torch's as DeepSpeed's client optimizer, or DeepSpeed's prebuilt FusedAdam
    as ds_config's optimizer section. ``ds_config`` must hold none (:func:`deepspeed_config` writes none).
    """
    if "optimizer" in ds_config:
        raise ValueError("ds_config already names an optimizer; learner.optimizer chooses it")
    import deepspeed

    name = resolve_optimizer(cfg.optimizer, device)
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "torch_adamw":
        client, config = torch_adamw(params, cfg, device), ds_config
    else:
        client, config = None, {**ds_config, "optimizer": fused_adam_section(cfg)}
    engine, _, _, scheduler = deepspeed.initialize(model=model, model_parameters=params, optimizer=client,
                                                   config=config, lr_scheduler=lr_scheduler)
    return engine, scheduler, name


def optimizer_step(engine, cfg: LearnerConfig, device: str) -> tuple[float, float]:
    """Step the optimizer after the boundary backward; (global grad norm before clipping, the lr used).

    ZeRO-0 fp32 (:func:`clips_itself`): the gradients are already all-reduced at this point, so the
    local norm is the global one; it is clipped here to ``cfg.grad_clip`` (0 = off). Otherwise
    DeepSpeed clips inside ``step`` and records the norm (NaN when it has none).
    """
    own_norm = None
    if clips_itself(cfg, device):
        params = [p for p in engine.module.parameters() if p.grad is not None]
        if not params:
            own_norm = 0.0
        elif cfg.grad_clip > 0:
            own_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
        else:
            own_norm = float(torch.nn.utils.get_total_norm([p.grad for p in params]))
    lr = float(engine.optimizer.param_groups[0]["lr"])
    engine.step()
    norm = own_norm if own_norm is not None else engine.get_global_grad_norm()
    return float("nan") if norm is None else float(norm), lr


def bare_update(engine, micro_batches: list, loss_tokens: int) -> None:
    """One update of the bare library, the reference the learner benchmark and the GPU smoke compare
    ``RankEngine.train_update`` against: DeepSpeed forward, a summed token cross-entropy over the
    collated micro-batches (``learner.batching.collate``, padded or packed) divided by the update's loss
    tokens, one step."""
    dev = engine.device
    for i, mb in enumerate(micro_batches):
        engine.set_gradient_accumulation_boundary(i == len(micro_batches) - 1)
        if mb.packed is not None:       # the rows end to end (learner.packing), the model loaded to read them so
            logits, targets = engine(**mb.packed.model_kwargs(dev), use_cache=False).logits, mb.packed.targets  # (1, N, V)
        else:
            logits = engine(input_ids=mb.input_ids.to(dev), attention_mask=mb.attention_mask.to(dev),
                            use_cache=False).logits                                          # (B, L, V)
            targets = mb.targets
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.to(dev).flatten(),
                                                 ignore_index=-100, reduction="sum") / loss_tokens
        engine.backward(loss, scale_wrt_gas=False)
    engine.step()


# --- full weights ------------------------------------------------------------------------------------
def full_params(module: torch.nn.Module, zero_stage: int) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) per unique parameter of a DeepSpeed module; under ZeRO-3 each is
    gathered in turn (a collective: every rank must iterate), so peak memory is one parameter."""
    import deepspeed

    for name, p in module.named_parameters():
        if zero_stage == 3:
            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                yield name, p.data.detach().clone()
        else:
            yield name, p.data.detach()


def cpu_state_dict(module: torch.nn.Module, zero_stage: int) -> dict[str, torch.Tensor]:
    """CPU copies of every full parameter (a collective under ZeRO-3: call it on every rank)."""
    return {name: t.to("cpu", copy=True) for name, t in full_params(module, zero_stage)}
