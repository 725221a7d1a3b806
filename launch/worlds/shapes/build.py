"""The shapes world: real-size tensors on CPU. Qwen2.5-0.5B's architecture with random weights, a
tokenizer of its vocabulary size (151,936), and the tiny world's problems as prompts.

    python -m launch.worlds shapes          # build into $LAGRL_CACHE/shapes-world-v1-s0 and print it

What it is for: the run's memory and time at the shapes that matter (a 152K-token vocabulary, 24
layers of width 896, responses of hundreds of tokens), on a machine without the real weights and
without network. What it is not: a model that learns anything. Its outputs are random tokens, so
every response runs to the response budget and every reward is 0 (``launch.worlds.shapes.scale`` keeps
zero-advantage groups in the loss so the learner still does its full work).

The tokenizer is a byte-level BPE with Qwen2's pre-tokenisation (as the tiny world's, so
transformers and vLLM load it as ``Qwen2Tokenizer``) whose vocabulary is built, not trained: the
256 byte symbols, every pair of them, then byte triples, until the vocabulary plus the special
tokens is exactly 151,936 (the embedding matrix's row count). Everything is a function of the
seed; the build is atomic and serialised like the tiny world's.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path

from launch.worlds.cache import World, ensure_world
from launch.worlds.tiny.task import make_splits, write_jsonl

BUILD_VERSION = 1
VOCAB_SIZE = 151_936            # Qwen2.5-0.5B's config.vocab_size
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen25_05b_config():
    """Qwen2.5-0.5B's architecture (its published config.json), for random initialisation."""
    from transformers import Qwen2Config

    eos = VOCAB_SIZE - len(SPECIAL_TOKENS)          # <|endoftext|>: the first special token
    return Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0,
        rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=True, use_sliding_window=False,
        sliding_window=32768, max_window_layers=24, attention_dropout=0.0, initializer_range=0.02,
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, dtype="bfloat16",
    )


def built_vocab(size: int, seed: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE vocabulary of exactly ``size`` symbols and the merges that build it."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())           # the 256 byte symbols
    vocab = {s: i for i, s in enumerate(alphabet)}
    merges: list[tuple[str, str]] = []
    pairs = [(a, b) for a in alphabet for b in alphabet]
    triples_from = pairs[:]
    random.Random(seed).shuffle(triples_from)
    triples = ((a + b, c) for a, b in triples_from for c in alphabet)   # a pair, then a byte
    for left, right in itertools.chain(pairs, triples):
        if len(vocab) >= size:
            break
        token = left + right
        if token not in vocab:
            vocab[token] = len(vocab)
            merges.append((left, right))
    return vocab, merges


def build_tokenizer(out_dir: Path, seed: int):
    """Save a fast tokenizer of VOCAB_SIZE tokens to ``out_dir``; returns the ``tokenizers`` object."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    vocab, merges = built_vocab(VOCAB_SIZE - len(SPECIAL_TOKENS), seed)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL_TOKENS[0], pad_token=SPECIAL_TOKENS[0]
                            ).save_pretrained(out_dir)
    return tok


def check_tokenizer(model_dir: Path, tok) -> None:
    """The directory's tokenizer, as transformers loads it next to the model's config (the class
    vLLM uses too), has the full vocabulary and encodes like the one built."""
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(model_dir)
    if len(reloaded) != VOCAB_SIZE:
        raise RuntimeError(f"shapes tokenizer has {len(reloaded)} tokens, expected {VOCAB_SIZE}")
    text = "Q: 12+34\nA: \\boxed{46}"
    if reloaded(text)["input_ids"] != tok.encode(text).ids or reloaded.decode(reloaded(text)["input_ids"]) != text:
        raise RuntimeError(f"shapes tokenizer changes when reloaded from {model_dir}")


def _build(out: Path, seed: int, log) -> dict:
    import torch
    from transformers import Qwen2ForCausalLM


    t0 = time.monotonic()
    train, _ = make_splits(seed)
    (out / "data").mkdir(parents=True)
    write_jsonl(train, out / "data" / "train.jsonl")
    tok = build_tokenizer(out / "model", seed)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qwen25_05b_config()).to(torch.bfloat16)   # stored in bf16, as the real one
    params = sum(p.numel() for p in model.parameters())
    log(f"[shapes] tokenizer {tok.get_vocab_size()} tokens; model {params:,} parameters (Qwen2.5-0.5B shapes, random)")
    model.generation_config.do_sample = True
    model.save_pretrained(out / "model", safe_serialization=True)
    check_tokenizer(out / "model", tok)
    manifest = {"build_version": BUILD_VERSION, "seed": seed, "vocab_size": tok.get_vocab_size(), "parameters": params,
                "n_train": len(train), "build_seconds": round(time.monotonic() - t0, 1)}
    (out / "world.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def ensure_shapes_world(seed: int = 0, cache_dir: Path | None = None, log=print) -> World:
    """The cached world for ``seed``, built first if missing (~1 min, 1 GB on disk)."""
    return ensure_world(f"shapes-world-v{BUILD_VERSION}-s{seed}", lambda tmp: _build(tmp, seed, log), cache_dir, log)
