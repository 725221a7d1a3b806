"""A learner rank's weights as the weight transport reads them (``actors.transport.WeightSource``).

Metadata comes without any gather (under ZeRO-3 a parameter's full shape is ``ds_shape``).
Tensors come bucket by bucket: under ZeRO-3 each bucket is gathered on every rank
(``deepspeed.zero.GatheredParameters``) and released before the next, so the full model never
sits on one rank at once; every rank must walk the same plan to the end (the transport does).
"""

from __future__ import annotations

from typing import Iterator

import torch

from actors.transport import NamedTensors, ParamMeta


class EngineWeights:
    """The weights of one rank's DeepSpeed module (HF names, tied parameters once)."""

    def __init__(self, module: torch.nn.Module, rank: int, zero3: bool):
        self.module, self.rank, self.collective = module, rank, zero3

    def metadata(self) -> list[ParamMeta]:
        out = []
        for name, p in self.module.named_parameters():
            shape = tuple(p.ds_shape) if self.collective and hasattr(p, "ds_shape") else tuple(p.shape)
            out.append(ParamMeta(name, str(p.dtype).removeprefix("torch."), shape))
        return out

    def buckets(self, plan: list[list[ParamMeta]]) -> Iterator[NamedTensors]:
        import deepspeed

        params = dict(self.module.named_parameters())
        for bucket in plan:
            group = [params[m.name] for m in bucket]
            # The caller uses the tensors while this generator is suspended inside the context:
            # gathered exactly as long as they are read.
            with deepspeed.zero.GatheredParameters(group, modifier_rank=None, enabled=self.collective):
                yield [(m.name, p.data.detach()) for m, p in zip(bucket, group)]
