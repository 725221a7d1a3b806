"""The one tokenizer trainer of the CPU worlds: a byte-level BPE on a world's own text, saved in Hugging
Face fast format.

It uses exactly Qwen2's normaliser and pre-tokenisation (NFC, Qwen2's split regex, byte level):
transformers 5 and vLLM load any ``model_type: qwen2`` directory through ``Qwen2Tokenizer``, which
rebuilds those pieces from its own code, so a tokenizer trained any other way would encode
differently once reloaded. Qwen2's regex also puts every digit in a token of its own, which is
what a small model needs to learn arithmetic. A world may give it a chat template (the code world's
verl rows go through ``apply_chat_template`` like a real model's).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

EOS = "<|endoftext|>"


def train_tokenizer(texts: list[str], out_dir: Path, *, vocab_size: int,
                    chat_template: str | None = None) -> PreTrainedTokenizerBase:
    """Train on ``texts``, save to ``out_dir`` and return the tokenizer *as reloaded* from there."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(out_dir)
    reloaded = AutoTokenizer.from_pretrained(out_dir)
    for text in texts[:64]:  # fail the build, not the run, if the round trip ever diverges
        if reloaded(text)["input_ids"] != tok.encode(text).ids:
            raise RuntimeError(f"tokenizer changes when reloaded from {out_dir}: {text!r}")
    if reloaded.chat_template != chat_template:
        raise RuntimeError(f"the chat template did not survive the reload from {out_dir}")
    return reloaded
