"""The tiny policy: a 2-layer Qwen2 causal LM small enough to train on 2 CPU cores in minutes.

Qwen2 because both transformers and vLLM load it natively; head_dim 64 because every vLLM
attention backend (CPU included) supports it.
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def tiny_qwen2_config(vocab_size: int, eos_token_id: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=eos_token_id,
        eos_token_id=eos_token_id, pad_token_id=eos_token_id, dtype="float32",
        use_sliding_window=False,
    )


def init_tiny_model(vocab_size: int, eos_token_id: int, seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_qwen2_config(vocab_size, eos_token_id))
    return model.float()
