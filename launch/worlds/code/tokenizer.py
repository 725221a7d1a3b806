"""A byte-level BPE tokenizer trained on the code world's text, with a chat template, in Hugging Face
fast format.

Qwen2's normaliser and pre-tokenisation (NFC, Qwen2's split regex, byte level), as in the tiny world:
transformers and vLLM load a ``model_type: qwen2`` directory through ``Qwen2Tokenizer``, which rebuilds
those pieces itself. The chat template renders a system message as ``# <content>``, a user message as
``Q: <content>`` and the generation prompt as ``A: ``, so the world's verl rows go through
``apply_chat_template`` like a real model's, system message included.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

EOS = "<|endoftext|>"
VOCAB_SIZE = 400
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}# {{ m['content'] }}\n"
                 "{% elif m['role'] == 'user' %}Q: {{ m['content'] }}\n{% else %}A: {{ m['content'] }}\n{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}A: {% endif %}")


def train_tokenizer(texts: list[str], out_dir: Path) -> PreTrainedTokenizerBase:
    """Train, save to ``out_dir``, and return the tokenizer as reloaded from there."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    reloaded = AutoTokenizer.from_pretrained(out_dir)
    for text in texts[:64]:  # fail the build, not the run, if the round trip ever diverges
        if reloaded(text)["input_ids"] != tok.encode(text).ids:
            raise RuntimeError(f"tokenizer changes when reloaded from {out_dir}: {text!r}")
    if reloaded.chat_template != CHAT_TEMPLATE:
        raise RuntimeError(f"the chat template did not survive the reload from {out_dir}")
    return reloaded
