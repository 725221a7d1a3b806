"""Supervised fine-tuning stage: a JSONL of prompt/response pairs -> a Hugging Face model directory.

    python -m launch.sft --model_dir /models/qwen-math-7b --train_path sft.jsonl --out stage1-sft
    torchrun --nproc_per_node 8 -m launch.sft --model_dir ... --zero_stage 3 --out ...   # one process per GPU
    python -m launch.sft --print-config                                                  # every field, defaults

Sky-T1-7B's SFT stages (NovaSky 2025: 3 epochs, lr 1e-5, batch 96) are the defaults. The loss is the
token-level cross-entropy of the response tokens (prompt tokens are context only), averaged over
every response token of the batch on all ranks, so micro-batching and data parallelism do not change
it; the model, the DeepSpeed engine settings and the row layout are the RL learner's
(``learner.engine.deepspeed_config``, ``learner.batching``). The output directory is what a learner
checkpoint's ``hf/`` is (``save_pretrained`` weights, config and the input's tokenizer files), so both
the learner and vLLM load it and the next RL stage takes it as ``--data.model_dir``; ``sft.json``
beside the weights records the config and the loss of every update. The directory appears only when
complete (written to a temporary sibling, then renamed).

JSONL rows: ``prompt`` (the exact text the model reads before the response; ``--render true`` renders
it as the RL run renders a problem: the tokenizer's chat template with the boxed-answer instruction,
else ``--template``) and ``response`` (the target text; EOS is appended).
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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


def parse(argv: list[str]) -> tuple[SftConfig, bool]:
    """``--field value`` pairs -> a validated config; (config, --print-config given)."""
    import difflib

    from pydantic import ValidationError

    from launch.overrides import ConfigError, parse_value, split_overrides

    print_only = "--print-config" in argv
    argv = [a for a in argv if a != "--print-config"]
    if "-h" in argv or "--help" in argv:
        print(__doc__)
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


def main(argv: list[str] | None = None) -> None:
    cfg, print_only = parse(sys.argv[1:] if argv is None else argv)
    from launch.install_check import require_own_packages

    require_own_packages()
    if print_only:
        print(cfg.model_dump_json(indent=2), flush=True)
        return
    from launch.run.sft import train_sft

    result = train_sft(cfg)
    print(f"[sft] {result['updates']} updates on {result['examples']} examples ({result['dropped']} dropped) in "
          f"{result['seconds']:.0f} s; loss {result['loss_first']:.3f} -> {result['loss_last']:.3f}; "
          f"model: {cfg.out}", flush=True)


if __name__ == "__main__":
    main()
