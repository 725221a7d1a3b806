"""Supervised fine-tuning stage: a JSONL of prompt/response pairs -> a Hugging Face model directory.

    python -m launch.recipes.sft --model_dir /models/qwen-math-7b --train_path sft.jsonl --out stage1-sft
    torchrun --nproc_per_node 8 -m launch.recipes.sft --model_dir ... --zero_stage 3 --out ...   # one process per GPU
    python -m launch.recipes.sft --print-config                                                  # every field, defaults

Sky-T1-7B's SFT stages (NovaSky 2025: 3 epochs, lr 1e-5, batch 96) are the defaults. The loss is the
token-level cross-entropy of the response tokens (prompt tokens are context only), averaged over
every response token of the batch on all ranks, so micro-batching and data parallelism do not change
it; the model, the DeepSpeed engine settings and the row layout are the RL learner's
(``learner.deepspeed_kit``, ``learner.batching``). The output directory is what a learner
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

from launch.config.install_check import require_own_packages
from launch.recipes.sft.config import parse


def main(argv: list[str] | None = None) -> None:
    cfg, print_only = parse(sys.argv[1:] if argv is None else argv, usage=__doc__)
    require_own_packages()
    if print_only:
        print(cfg.model_dump_json(indent=2), flush=True)
        return
    from launch.recipes.sft.train import train_sft     # torch: after the arguments (--help, --print-config)

    result = train_sft(cfg)
    print(f"[sft] {result['updates']} updates on {result['examples']} examples ({result['dropped']} dropped) in "
          f"{result['seconds']:.0f} s; loss {result['loss_first']:.3f} -> {result['loss_last']:.3f}; "
          f"model: {cfg.out}", flush=True)


if __name__ == "__main__":
    main()
