"""The shapes world's pieces without building it: Qwen2.5-0.5B's parameter count from the config
(on the meta device, no memory), and the constructed BPE vocabulary."""

from __future__ import annotations

import torch

from launch.worlds.shapes.build import SPECIAL_TOKENS, VOCAB_SIZE, built_vocab, qwen25_05b_config


def test_config_is_qwen25_05b():
    from transformers import Qwen2ForCausalLM

    cfg = qwen25_05b_config()
    with torch.device("meta"):
        model = Qwen2ForCausalLM(cfg)
    # embeddings 151936 x 896 (tied with the head) + 24 layers + the final norm
    per_layer = (896 * 896 + 896) + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
    assert sum(p.numel() for p in model.parameters()) == 151_936 * 896 + 24 * per_layer + 896 == 494_032_768
    assert cfg.eos_token_id == VOCAB_SIZE - len(SPECIAL_TOKENS)


def test_built_vocab_has_the_size_and_valid_merges():
    vocab, merges = built_vocab(70_000, seed=0)
    assert len(vocab) == 70_000 and sorted(vocab.values()) == list(range(70_000))
    assert len(merges) == 70_000 - 256
    assert all(left in vocab and right in vocab and vocab[left + right] > max(vocab[left], vocab[right])
               for left, right in merges)                # each merge builds a newer token from older ones
    assert built_vocab(70_000, seed=0) == (vocab, merges) and built_vocab(70_000, seed=1) != (vocab, merges)
