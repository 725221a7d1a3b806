"""actors.engine.kv_cache_cap_bytes: a GPU engine's KV cache bounded by what its sequences can fill."""

from __future__ import annotations

import json

import pytest

from actors.config import ActorConfig
from actors.engine import kv_cache_cap_bytes

GIB = 1 << 30
TINY = {"model_type": "qwen2", "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
        "head_dim": 64, "hidden_size": 128}
QWEN25_15B = {"model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
              "hidden_size": 1536}                                    # head_dim from hidden_size / heads: 128


def _model(tmp_path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def _gpu(**kw) -> ActorConfig:
    return ActorConfig(**{"num_gpus": 0.5, "gpu_memory_utilization": 0.25, "max_model_len": 128, **kw})


def test_the_tiny_model_on_a_quarter_of_an_h100_gets_what_its_sequences_can_fill(tmp_path):
    # K and V of 2 layers x 2 heads x 64 dims in bf16: 1 KiB a token; 1024 sequences x (128 + 128) tokens
    cap = kv_cache_cap_bytes(_gpu(), _model(tmp_path, TINY), 1024, "bfloat16", 80 * GIB)
    assert cap == 1024 * 256 * 1024 == 256 * (1 << 20)
    # fp32 doubles it; a 129-token context rounds up to 256 + 128
    assert kv_cache_cap_bytes(_gpu(), _model(tmp_path, TINY), 1024, "float32", 80 * GIB) == 512 * (1 << 20)
    assert kv_cache_cap_bytes(_gpu(max_model_len=129), _model(tmp_path, TINY), 1024, "bfloat16", 80 * GIB) \
        == 1024 * 384 * 1024


def test_no_cap_where_the_share_is_not_four_times_larger(tmp_path):
    # Qwen2.5-1.5B: 28 KiB a token; 256 sequences at 16K tokens would be 115 GiB: the share decides
    big = _gpu(max_model_len=16384, gpu_memory_utilization=0.85, num_gpus=1)
    assert kv_cache_cap_bytes(big, _model(tmp_path, QWEN25_15B), 256, "bfloat16", 80 * GIB) is None
    # a small GPU: 256 MiB is not under a quarter of 0.25 x 1 GiB
    assert kv_cache_cap_bytes(_gpu(), _model(tmp_path, TINY), 1024, "bfloat16", GIB) is None
    assert kv_cache_cap_bytes(_gpu(), _model(tmp_path, TINY), 1024, "bfloat16", None) is None


@pytest.mark.parametrize("config", [
    {**TINY, "model_type": "deepseek_v3"},                 # latent KV: not K and V per layer
    {**TINY, "model_type": "qwen3_next"},                  # recurrent layers beside attention
    {k: v for k, v in TINY.items() if k != "num_hidden_layers"},
])
def test_no_cap_for_a_cache_the_config_does_not_size(tmp_path, config):
    assert kv_cache_cap_bytes(_gpu(), _model(tmp_path, config), 1024, "bfloat16", 80 * GIB) is None


def test_no_cap_without_a_local_config(tmp_path):
    assert kv_cache_cap_bytes(_gpu(), str(tmp_path / "missing"), 1024, "bfloat16", 80 * GIB) is None


def test_build_llm_passes_the_cap_and_falls_back_where_vllm_lacks_the_setting(tmp_path, monkeypatch):
    import vllm

    import actors.engine as engine

    for var in ("VLLM_ENABLE_V1_MULTIPROCESSING", "TOKENIZERS_PARALLELISM", engine.OWNER_ENV):
        monkeypatch.setenv(var, "x")                  # build_llm sets them: restored after the test
    calls = []

    class OldLLM:                                     # a vLLM whose engine arguments have no KV size
        def __init__(self, **kwargs):
            calls.append(kwargs)
            if "kv_cache_memory_bytes" in kwargs:
                raise TypeError("EngineArgs.__init__() got an unexpected keyword argument 'kv_cache_memory_bytes'")

    monkeypatch.setattr(vllm, "LLM", OldLLM)
    monkeypatch.setattr(engine, "gpu_total_bytes", lambda: 80 * GIB)
    engine.build_llm(_gpu(), _model(tmp_path, TINY), seed=0, max_num_seqs=1024)
    assert [c.get("kv_cache_memory_bytes") for c in calls] == [256 * (1 << 20), None]
    assert calls[1]["gpu_memory_utilization"] == 0.25


def test_an_unreadable_gpu_memory_is_said_loudly_and_the_cache_goes_uncapped(monkeypatch, capsys):
    """The fallback named: without the GPU's total the cap cannot be computed, and the engine is built without it."""
    from vllm.platforms import current_platform

    import actors.engine as engine

    def broken(device_id=0):
        raise RuntimeError("NVML: driver not loaded")

    monkeypatch.setattr(current_platform, "get_device_total_memory", broken)
    assert engine.gpu_total_bytes() is None
    out = capsys.readouterr().out
    assert "WARNING: could not read the GPU's total memory (RuntimeError: NVML: driver not loaded)" in out
    assert "without the cap" in out
