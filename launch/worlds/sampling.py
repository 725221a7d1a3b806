"""Sampling a world's policy the way the RL actors do: one response per prompt at temperature τ, no
top-k/top-p, with the entropy of every sampled token's distribution (what the adaptive entropy control
steers). Shared by the worlds that measure their warmed-up policy (reasoning, routes).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM


@torch.no_grad()
def generate(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, prompts: list[str], *, seed: int,
             temperature: float, max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
    """Sampled response token ids (cut after EOS) and the per-token entropy at τ, for each prompt."""
    model.eval()
    side, tok.padding_side = tok.padding_side, "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    tok.padding_side = side
    torch.manual_seed(seed)
    out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                         return_dict_in_generate=True, output_scores=True)
    new = out.sequences[:, enc["input_ids"].shape[1]:]                     # (B, T)
    scores = torch.stack(out.scores, dim=1)                                # (B, T, V): logits / τ
    logp = torch.log_softmax(scores.float(), dim=-1)
    entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)         # (B, T)
    ids, ents = [], []
    for row, ent in zip(new.tolist(), entropy.tolist()):
        n = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        ids.append(row[:n])
        ents.append(ent[:n])
    return ids, ents


def generate_batched(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, prompts: list[str], *, seed: int,
                     temperature: float, max_new_tokens: int,
                     batch_size: int = 128) -> tuple[list[list[int]], list[list[float]]]:
    """:func:`generate` over ``prompts`` in batches of ``batch_size``; batch i is seeded ``seed + i * batch_size``."""
    ids, ents = [], []
    for start in range(0, len(prompts), batch_size):
        a, b = generate(model, tok, prompts[start:start + batch_size], seed=seed + start, temperature=temperature,
                        max_new_tokens=max_new_tokens)
        ids += a
        ents += b
    return ids, ents
