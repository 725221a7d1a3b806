"""Named methods injected into every vLLM worker (`worker_extension_cls`), and what must run there.

vLLM imports this module in every worker process before the model loads (the actor's own process
when the engine core is in-process, else the engine core's process and its tensor-parallel
workers). That is where

- lagrl's weight-transfer engines register with vLLM's factory (``actors.transport.vllm_engine``):
  every weight transport loads through them, never by passing tensors to ``collective_rpc``
  (vLLM's IPC hands an out-of-process worker ``[dtype, shape, index]`` lists, not tensors);
- an engine process starts watching the actor that owns it (``actors.engine.watch_owner``), so it
  never outlives it.

The methods here only read: they answer small JSON-able values through ``collective_rpc``.
"""

from __future__ import annotations

import torch

from actors.engine import watch_owner
from actors.transport.vllm_engine import register

register()
watch_owner()


class LagrlWorkerExtension:
    def lagrl_weights_checksum(self) -> float:
        """Sum of all materialised parameters in float64: shows that a swap happened. (On CPU vLLM
        repacks linear weights into kernel tensors, so this covers embeddings, norms and biases.)"""
        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model_runner.model.parameters()))

    def lagrl_param_checksums(self) -> dict[str, float]:
        """float64 sum of every materialised parameter by vLLM name (fused names such as ``qkv_proj``;
        a CPU-repacked linear weight has no elements and is left out)."""
        with torch.no_grad():
            return {name: float(p.double().sum()) for name, p in self.model_runner.model.named_parameters()
                    if p.numel() and p.device.type != "meta"}
