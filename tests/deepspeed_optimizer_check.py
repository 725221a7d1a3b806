"""One DeepSpeed rank in its own process (``python -m tests.deepspeed_optimizer_check OUT.json``), run by
tests/integration/test_learner_optimizer.py: torch.distributed state never touches the test process.

For ZeRO-0 and ZeRO-2 on CPU (fp32, a 2-layer random Qwen2, warm-up schedule, weight decay):

- ``same_as_before``: the learner's engine (``learner.optimizer``: torch AdamW, foreach, as DeepSpeed's
  client optimizer) and DeepSpeed's config-built optimizer that the learner used before
  (``"optimizer": {"type": "AdamW", "torch_adam": true}``) given the same three batches: the largest
  parameter difference;
- ``resume``: checkpoint after two updates (``learner.checkpoint.save_rank``), a third update; a new
  engine from different weights restores the checkpoint (``load_rank``): its optimizer moments and lr
  against the saved ones, and the largest difference after the same third update;
- ``shm_op``: whether DeepSpeed's shared-memory comm op was loaded, and what its extension
  directory (``TORCH_EXTENSIONS_DIR``, set by the test) holds afterwards.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch


def _tiny_model_dir(root: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(123)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    Qwen2ForCausalLM(cfg).save_pretrained(str(root / "model"))
    return root / "model"


def _batches(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, 64, (2, 12), generator=g) for _ in range(n)]


def _update(engine, ids: torch.Tensor) -> None:
    logits = engine(input_ids=ids, use_cache=False).logits                         # (B, L, V)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    engine.set_gradient_accumulation_boundary(True)
    engine.backward(loss, scale_wrt_gas=False)
    engine.step()


def _params(engine) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in engine.module.named_parameters()}


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _moments(engine) -> list[torch.Tensor]:
    """exp_avg and exp_avg_sq of every tensor the torch optimizer steps (ZeRO-2: its flat partitions)."""
    opt = getattr(engine.optimizer, "optimizer", engine.optimizer)
    return [s[k].clone() for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]


def check_stage(stage: int, model_dir: Path, tmp: Path) -> dict:
    import deepspeed

    from learner.checkpoint import load_rank, save_rank
    from learner.deepspeed_kit import load_hf_model, warmup_schedule
    from learner.engine import RankEngine
    from learner.trainer_config import LearnerConfig

    cfg = LearnerConfig(lr=1e-2, warmup_steps=2, weight_decay=0.1, zero_stage=stage, device="cpu", grad_clip=0.0)
    batches = _batches(3)
    ours = RankEngine(cfg, model_dir, 0, 1, "cpu", group_size=2, seed=0)
    before = load_hf_model(model_dir, torch.float32, False)
    old_section = {"type": "AdamW", "params": {"lr": cfg.lr, "betas": list(cfg.betas), "eps": cfg.adam_eps,
                                               "weight_decay": cfg.weight_decay, "torch_adam": True}}
    old, _, _, _ = deepspeed.initialize(model=before, model_parameters=[p for p in before.parameters()],
                                        config={**ours.ds_config, "optimizer": old_section},
                                        lr_scheduler=warmup_schedule(cfg.warmup_steps))
    for ids in batches[:2]:
        _update(ours.engine, ids)
        _update(old, ids)
    ckpt = tmp / f"ckpt{stage}"
    ours.version = 2
    save_rank(ours, ckpt, model_dir)
    saved_moments, saved_lr = _moments(ours.engine), ours.engine.optimizer.param_groups[0]["lr"]
    _update(ours.engine, batches[2])
    _update(old, batches[2])
    initial = {n: p.detach() for n, p in load_hf_model(model_dir, torch.float32, False).named_parameters()}
    out = {"optimizer": ours.optimizer_name, "client": type(ours.engine.basic_optimizer).__name__,
           "foreach": ours.engine.basic_optimizer.defaults.get("foreach"),
           "same_as_before": _max_diff(_params(ours.engine), _params(old)),
           "moved": _max_diff(_params(ours.engine), initial)}
    fresh = RankEngine(cfg, model_dir, 0, 1, "cpu", group_size=2, seed=1)
    with torch.no_grad():
        for p in fresh.engine.module.parameters():
            p.add_(torch.randn_like(p))                                    # different weights before the restore
    version = load_rank(fresh, ckpt)
    restored = _moments(fresh.engine)
    out["resume"] = {
        "version": version, "moments": len(restored),
        "moments_diff": max(float((a - b).abs().max()) for a, b in zip(restored, saved_moments)),
        "lr": fresh.engine.optimizer.param_groups[0]["lr"], "saved_lr": saved_lr,
    }
    _update(fresh.engine, batches[2])
    out["resume"]["after_step_diff"] = _max_diff(_params(fresh.engine), _params(ours.engine))
    return out


def main(out_path: str) -> None:
    os.environ["DS_ACCELERATOR"] = "cpu"
    from learner.deepspeed_kit import init_distributed

    init_distributed("cpu")                   # run plainly: one rank on a free loopback port
    from deepspeed.comm import comm

    ext_dir = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    result = {"shm_op_loaded": getattr(comm.cdb, "shm_comm_op", None) is not None}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model_dir = _tiny_model_dir(tmp)
        result["stages"] = {str(stage): check_stage(stage, model_dir, tmp) for stage in (0, 2)}
    result["extension_dir"] = sorted(p.name for p in ext_dir.rglob("*")) if ext_dir.exists() else []
    Path(out_path).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
