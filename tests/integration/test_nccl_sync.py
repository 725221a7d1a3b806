"""NCCL weight broadcast from a learner rank into a running vLLM engine (needs 2 GPUs: NCCL
will not put two ranks of one communicator on the same device)."""

from __future__ import annotations

import uuid

import pytest
import ray
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA GPUs")
def test_nccl_broadcast_updates_engine(tiny_world, ray_local, free_port, tmp_path):
    from transformers import AutoModelForCausalLM

    from actors.config import ActorConfig
    from actors.factory import create_generation_actors
    from actors.transport.nccl import NcclBroadcastTransport
    from buffer.server import EmbeddedRedis

    run_id = f"nccl-{uuid.uuid4().hex[:6]}"
    with EmbeddedRedis(tmp_path).start() as redis:
        cfg = ActorConfig(num_actors=1, num_gpus=1, max_model_len=128,
                          weight_transport="nccl", gpu_memory_utilization=0.3)
        [actor] = create_generation_actors(cfg, run_id, redis.url, str(tiny_world.model_dir), group_size=2)
        torch.cuda.set_device(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_world.model_dir).cuda()
        transport = NcclBroadcastTransport(run_id, "127.0.0.1", free_port)
        transport.connect_learner(model.named_parameters(), [actor])
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.5)
        location = transport.publish(model.named_parameters(), version=1)
        load = actor.sync_weights_from.remote(location)
        transport.after_announce()
        ray.get(load)
        expected = float(sum(p.double().sum() for p in model.parameters()))
        assert ray.get(actor.weights_checksum.remote()) == pytest.approx(expected, rel=1e-3)
