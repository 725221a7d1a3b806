"""Which AdamW the DeepSpeed engines step with, chosen so no op is ever compiled at run time.

DeepSpeed's own AdamW on CUDA is ``FusedAdam``, a CUDA extension that DeepSpeed JIT-compiles at
the first step unless the wheel was built with it (``DS_BUILD_FUSED_ADAM=1``): that needs ``nvcc``
and ``ninja`` matching torch's CUDA, which a GPU host often lacks, and takes minutes when it works.
So ``LearnerConfig.optimizer``:

- ``auto``: DeepSpeed's FusedAdam only when its op is prebuilt (DeepSpeed's installed-ops record,
  ``deepspeed.git_version_info.installed_ops``; nothing is probed or built), else torch's AdamW;
- ``torch_adamw``: ``torch.optim.AdamW``, ``fused=True`` on CUDA (one kernel for all tensors),
  ``foreach=True`` on CPU, handed to ``deepspeed.initialize`` as the client optimizer;
- ``deepspeed_fused_adam``: DeepSpeed's FusedAdam from the ds_config; refused when its op is not
  prebuilt or the engine is on CPU (it is a CUDA kernel).

The maths is the same whichever runs: decoupled weight decay (AdamW), bias-corrected moments,
``lr``/``betas``/``adam_eps``/``weight_decay`` from the config, the warm-up as a ``LambdaLR`` on the
optimizer, gradient clipping by DeepSpeed or the engine (``learner.deepspeed_kit.clips_itself``), and the
optimizer state saved and restored by DeepSpeed's checkpoints (the client optimizer's
``state_dict``, or ZeRO's partitions of it).

This module chooses; ``learner.deepspeed_kit.build_engine`` builds the engine with the choice.
"""

from __future__ import annotations

from typing import Any, Literal

OptimizerName = Literal["torch_adamw", "deepspeed_fused_adam"]
OptimizerChoice = Literal["auto", "torch_adamw", "deepspeed_fused_adam"]


def fused_adam_prebuilt() -> bool:
    """True when the installed DeepSpeed was built with its FusedAdam op (read from the record
    its setup wrote; never probes a compiler or builds anything)."""
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get("fused_adam", False))


def resolve_optimizer(choice: OptimizerChoice, device: str, prebuilt: bool | None = None) -> OptimizerName:
    """The optimizer ``choice`` means on ``device`` ('cpu' or 'cuda'); ``prebuilt``: whether
    DeepSpeed's FusedAdam op is prebuilt (None = look it up)."""
    if choice == "torch_adamw":
        return "torch_adamw"
    if device != "cuda":
        if choice == "deepspeed_fused_adam":
            raise ValueError("learner.optimizer=deepspeed_fused_adam is a CUDA kernel; this learner runs on CPU: "
                             "use --learner.optimizer torch_adamw (or auto)")
        return "torch_adamw"
    prebuilt = fused_adam_prebuilt() if prebuilt is None else prebuilt
    if choice == "deepspeed_fused_adam" and not prebuilt:
        raise ValueError("learner.optimizer=deepspeed_fused_adam but the installed DeepSpeed has no prebuilt "
                         "FusedAdam op (it would be JIT-compiled at the first step, needing nvcc): use "
                         "--learner.optimizer torch_adamw (or auto), or install DeepSpeed built with "
                         "DS_BUILD_FUSED_ADAM=1")
    return "deepspeed_fused_adam" if prebuilt else "torch_adamw"


def optimizer_label(name: OptimizerName, device: str) -> str:
    """What the console says, e.g. 'torch AdamW (fused)'."""
    if name == "deepspeed_fused_adam":
        return "DeepSpeed FusedAdam (prebuilt op)"
    return f"torch AdamW ({'fused' if device == 'cuda' else 'foreach'})"


def _adamw_settings(cfg) -> dict[str, Any]:
    """The AdamW hyper-parameters of a ``LearnerConfig`` (the same for every implementation)."""
    return {"lr": cfg.lr, "betas": tuple(cfg.betas), "eps": cfg.adam_eps, "weight_decay": cfg.weight_decay}


def torch_adamw(params, cfg, device: str):
    """torch's AdamW over ``params``: one fused kernel on CUDA, the foreach path on CPU."""
    import torch

    impl = {"fused": True} if device == "cuda" else {"foreach": True}
    return torch.optim.AdamW(params, **_adamw_settings(cfg), **impl)


def fused_adam_section(cfg) -> dict:
    """ds_config's optimizer section for DeepSpeed's (prebuilt) FusedAdam in AdamW mode."""
    s = _adamw_settings(cfg)
    return {"type": "AdamW", "params": {**s, "betas": list(s["betas"]), "torch_adam": False}}
