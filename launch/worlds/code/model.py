"""The code world's policy: the tiny world's 2-layer Qwen2 shape (loadable by transformers and vLLM),
with room for prompt + response (a code prompt is ~12 tokens, an answer ~14)."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from launch.worlds.code import MAX_MODEL_LEN


def code_qwen2_config(vocab_size: int, eos_token_id: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=2 * MAX_MODEL_LEN,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=eos_token_id,
        eos_token_id=eos_token_id, pad_token_id=eos_token_id, dtype="float32", use_sliding_window=False,
    )


def init_code_model(vocab_size: int, eos_token_id: int, seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(code_qwen2_config(vocab_size, eos_token_id)).float()
