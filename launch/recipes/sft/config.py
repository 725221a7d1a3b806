"""The SFT stage's options (``SftConfig``) and their command line (``--field value``, as the RL runs')."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from launch.config.overrides import ConfigError, parse_value, split_overrides


class SftConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: str = Field(..., description="Hugging Face model directory to start from (a base model, an "
                           "earlier SFT output or an RL checkpoint's hf/ directory).")
    train_path: str = Field(..., description="JSONL of prompt/response pairs.")
    out: str = Field(..., description="Output model directory (must not exist unless --overwrite true).")
    overwrite: bool = Field(False, description="Replace an existing output directory.")
    prompt_key: str = Field("prompt", description="Field holding the prompt text.")
    response_key: str = Field("response", description="Field holding the target response text.")
    render: bool = Field(False, description="Render the prompt field like the RL run renders a problem "
                         "(launch.run.data.PromptRenderer) instead of using it verbatim.")
    template: str = Field("{problem}\n", description="With render and no chat template: the prompt template.")
    max_tokens: int = Field(32768, ge=2, description="Examples longer than this (prompt + response) are dropped "
                            "and counted.")
    epochs: float = Field(3.0, gt=0, description="Passes over the data (Sky-T1: 3); a fraction stops early.")
    batch_size: int = Field(96, ge=1, description="Examples per optimizer update, all ranks together (Sky-T1: 96).")
    lr: float = Field(1e-5, gt=0, description="AdamW peak learning rate (Sky-T1: 1e-5).")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up over this many updates, then constant.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2).")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    grad_clip: float = Field(1.0, ge=0, description="Clip the global grad norm of each update; 0 = off.")
    micro_batch_tokens: int = Field(16384, ge=1, description="Padded tokens per micro-batch per rank.")
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage.")
    dtype: Literal["auto", "fp32", "bf16"] = Field("auto", description="'auto': bf16 on GPU, fp32 on CPU.")
    gradient_checkpointing: bool = Field(False, description="HF activation checkpointing.")
    seed: int = Field(0, ge=0, description="Seeds the example order (per epoch) and torch.")


def parse(argv: list[str], usage: str = "") -> tuple[SftConfig, bool]:
    """``--field value`` pairs -> a validated config; (config, --print-config given). ``--help`` prints
    ``usage`` and every field."""
    import difflib

    from pydantic import ValidationError


    print_only = "--print-config" in argv
    argv = [a for a in argv if a != "--print-config"]
    if "-h" in argv or "--help" in argv:
        print(usage)
        for name, f in SftConfig.model_fields.items():
            print(f"  --{name} ({'required' if f.is_required() else f.default}): {f.description}")
        raise SystemExit(0)
    try:
        pairs = split_overrides(argv)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    fields = list(SftConfig.model_fields)
    for key, _ in pairs:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=2)
            raise SystemExit(f"error: unknown option --{key}" + (f"; did you mean --{close[0]}?" if close else ""))
    data = {k: parse_value(v) if SftConfig.model_fields[k].annotation is not str else v for k, v in pairs}
    if print_only:
        data = {k: "<required>" for k, f in SftConfig.model_fields.items() if f.is_required()} | data
    try:
        return SftConfig.model_validate(data), print_only
    except ValidationError as exc:
        lines = [f"  --{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise SystemExit("error: invalid options:\n" + "\n".join(lines)) from None

