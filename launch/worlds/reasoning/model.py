"""The reasoning world's policy: a small Qwen2 causal LM that 2 CPU cores can warm up in minutes.

Qwen2 because both transformers and vLLM load it natively; head_dim 64 because every vLLM
attention backend (CPU included) supports it. Four layers because copying "the operand after the
one just added" out of the prompt is a two-hop lookup (find the previous operand, read what follows
it), which takes at least two attention layers on top of the digit arithmetic.
max_position_embeddings covers the longest prompt plus the largest stage budget (launch.worlds.reasoning.MAX_MODEL_LEN).
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

HIDDEN, LAYERS, HEADS, INTERMEDIATE = 128, 4, 2, 512
MAX_POSITIONS = 512


def reasoning_qwen2_config(vocab_size: int, eos_token_id: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id, dtype="float32",
        use_sliding_window=False,
    )


def init_reasoning_model(vocab_size: int, eos_token_id: int, seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(reasoning_qwen2_config(vocab_size, eos_token_id)).float()
