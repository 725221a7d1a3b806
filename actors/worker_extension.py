"""Named methods injected into every vLLM worker (`worker_extension_cls`).

Weight updates go through these instead of reaching into engine internals from outside:
`LLM.collective_rpc("lagrl_load_weights", args=(named_tensors,))` runs on every worker,
which reloads in place through vLLM's own `reload_weights` (it re-applies the loader logic:
fused QKV / gate-up sharding, tensor-parallel slicing, tied embeddings).

vLLM imports this module in every worker process before the model loads, which is where the
collective transport's weight-transfer engine registers itself (``actors.transport.vllm_engine``),
so multi-process and tensor-parallel workers can create it.
"""

from __future__ import annotations

import torch

from actors.transport.vllm_engine import refresh_packed_copies, register

register()


class LagrlWorkerExtension:
    def lagrl_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Load HF-named tensors (checkpoint format) into the running model; returns how many."""
        self.reload_weights(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        # vLLM 0.32 CPU: the tied lm_head keeps a packed oneDNN copy the reload does not refresh
        refresh_packed_copies(self.model_runner.model)
        return len(named_tensors)

    def lagrl_weights_checksum(self) -> float:
        """Sum of all materialised parameters in float64: shows that a swap happened. (On CPU vLLM
        repacks linear weights into kernel tensors, so this covers embeddings, norms and biases.)"""
        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model_runner.model.parameters()))
