"""learner.optimizer: which AdamW runs (never a JIT-built op), its name on the console, and the same
maths as before (one AdamW step checked against hand-computed values)."""

from __future__ import annotations

import math

import pytest
import torch

from learner.deepspeed_kit import build_engine, deepspeed_config
from learner.optimizer import (
    fused_adam_prebuilt,
    fused_adam_section,
    optimizer_label,
    resolve_optimizer,
    torch_adamw,
)
from learner.trainer_config import LearnerConfig


@pytest.mark.parametrize("choice, device, prebuilt, want", [
    ("auto", "cpu", True, "torch_adamw"),                      # FusedAdam is a CUDA kernel
    ("auto", "cuda", False, "torch_adamw"),                    # not prebuilt: never JIT
    ("auto", "cuda", True, "deepspeed_fused_adam"),
    ("torch_adamw", "cuda", True, "torch_adamw"),
    ("deepspeed_fused_adam", "cuda", True, "deepspeed_fused_adam"),
])
def test_resolve(choice, device, prebuilt, want):
    assert resolve_optimizer(choice, device, prebuilt=prebuilt) == want


def test_fused_adam_refused_where_it_would_compile_or_cannot_run():
    with pytest.raises(ValueError, match="no prebuilt FusedAdam.*--learner.optimizer torch_adamw"):
        resolve_optimizer("deepspeed_fused_adam", "cuda", prebuilt=False)
    with pytest.raises(ValueError, match="CUDA kernel.*--learner.optimizer torch_adamw"):
        resolve_optimizer("deepspeed_fused_adam", "cpu", prebuilt=True)


def test_installed_deepspeed_has_no_prebuilt_fused_adam_here():
    """This machine's DeepSpeed wheel is built without ops: auto must not pick FusedAdam on CUDA."""
    assert fused_adam_prebuilt() is False
    assert resolve_optimizer("auto", "cuda") == "torch_adamw"


def test_labels():
    assert optimizer_label("torch_adamw", "cuda") == "torch AdamW (fused)"
    assert optimizer_label("torch_adamw", "cpu") == "torch AdamW (foreach)"
    assert optimizer_label("deepspeed_fused_adam", "cuda") == "DeepSpeed FusedAdam (prebuilt op)"


def test_torch_adamw_settings_and_implementation():
    cfg = LearnerConfig(lr=3e-4, betas=(0.8, 0.95), adam_eps=1e-6, weight_decay=0.1)
    p = [torch.nn.Parameter(torch.zeros(3))]
    cpu, cuda_like = torch_adamw(p, cfg, "cpu"), torch_adamw(p, cfg, "cuda")
    for opt in (cpu, cuda_like):
        d = opt.defaults
        assert (d["lr"], d["betas"], d["eps"], d["weight_decay"]) == (3e-4, (0.8, 0.95), 1e-6, 0.1)
    assert cpu.defaults["foreach"] is True and not cpu.defaults["fused"]
    assert cuda_like.defaults["fused"] is True
    assert fused_adam_section(cfg) == {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6,
                                                                   "weight_decay": 0.1, "torch_adam": False}}


def test_two_adamw_steps_match_the_formula():
    """Decoupled weight decay, bias-corrected moments: p <- p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)."""
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.99, 1e-8, 0.01
    cfg = LearnerConfig(lr=lr, betas=(b1, b2), adam_eps=eps, weight_decay=wd)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = torch_adamw([p], cfg, "cpu")
    grads = [[0.5, -1.0], [0.25, 2.0]]
    want, m, v = [1.0, -2.0], [0.0, 0.0], [0.0, 0.0]
    for t, g in enumerate(grads, start=1):
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        for i in range(2):
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] ** 2
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            want[i] = want[i] * (1 - lr * wd) - lr * m_hat / (math.sqrt(v_hat) + eps)
    assert p.detach().tolist() == pytest.approx(want, rel=1e-12)
    # by hand, element 0: step 1 m_hat/sqrt(v_hat) = 1, p = 0.999 - 0.1 = 0.899; step 2 m = 0.07, v = 0.0031,
    # m_hat = 0.07/0.19 = 0.368421, sqrt(v_hat) = sqrt(0.0031/0.0199) = 0.394688, p = 0.899*0.999 - 0.0933450
    assert p.detach()[0].item() == pytest.approx(0.804756, abs=1e-6)


def test_ds_config_names_no_optimizer_and_a_second_one_is_refused():
    cfg = LearnerConfig()
    ds = deepspeed_config(cfg, world=1, device="cpu", group_size=4)
    assert "optimizer" not in ds and ds["zero_allow_untested_optimizer"] is True
    with pytest.raises(ValueError, match="learner.optimizer chooses it"):
        build_engine(torch.nn.Linear(2, 2), cfg, {**ds, "optimizer": fused_adam_section(cfg)}, "cpu")


def test_optimizer_is_an_engine_field():
    assert LearnerConfig(optimizer="torch_adamw").engine_signature()["optimizer"] == "torch_adamw"
