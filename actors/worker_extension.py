"""Named methods injected into every vLLM worker (`worker_extension_cls`).

Weight updates go through these instead of reaching into engine internals from outside:
`LLM.collective_rpc("lagrl_load_weights", args=(named_tensors,))` runs on every worker,
which reloads in place through vLLM's own `reload_weights` (it re-applies the loader logic:
fused QKV / gate-up sharding, tensor-parallel slicing, tied embeddings).
"""

from __future__ import annotations

import torch

from actors.transport.nccl import NcclWorkerMixin


class LagrlWorkerExtension(NcclWorkerMixin):
    def lagrl_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Load HF-named tensors (checkpoint format) into the running model; returns how many."""
        self.reload_weights(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        self._lagrl_refresh_packed_copies()
        return len(named_tensors)

    def _lagrl_refresh_packed_copies(self) -> None:
        """vLLM 0.32 CPU: layers that keep their weight *and* a packed oneDNN copy of it (the
        tied lm_head / embedding) are not re-packed by `reload_weights`, so logits would still
        use the old weights. Re-run their own post-load processing. Layers whose weight was
        replaced by the packed copy (numel 0) were already re-processed by the reload."""
        for module in self.model_runner.model.modules():
            weight = getattr(module, "weight", None)
            method = getattr(module, "quant_method", None)
            if hasattr(module, "cpu_linear") and method is not None and weight is not None and weight.numel():
                method.process_weights_after_loading(module)

    def lagrl_weights_checksum(self) -> float:
        """Sum of all materialised parameters in float64: shows that a swap happened. (On CPU vLLM
        repacks linear weights into kernel tensors, so this covers embeddings, norms and biases.)"""
        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model_runner.model.parameters()))
