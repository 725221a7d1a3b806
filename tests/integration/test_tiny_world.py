"""The tiny world loads in both transformers and vLLM, agrees between them, and builds deterministically."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.integration

PROMPTS = ["Q: 12+7\nA: ", "Q: 3+41\nA: ", "Q: 40+9\nA: "]


def test_vllm_and_transformers_agree_on_greedy_continuation(tiny_world, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
    from vllm import LLM, SamplingParams

    tok = AutoTokenizer.from_pretrained(tiny_world.model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_world.model_dir)
    hf = []
    for prompt in PROMPTS:
        enc = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=10, pad_token_id=tok.pad_token_id)
        hf.append(out[0, enc["input_ids"].shape[1]:].tolist())

    llm = LLM(str(tiny_world.model_dir), dtype="float32", enforce_eager=True, max_model_len=128, seed=0)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=10))
    vl = [list(o.outputs[0].token_ids) for o in outs]
    del llm

    assert vl == hf
    # and the warm-up did teach the format: greedy answers are boxed and end with EOS
    assert all(tok.decode(ids, skip_special_tokens=True).startswith("\\boxed{") for ids in hf)


def test_build_is_deterministic(tmp_path):
    from launch.worlds.tiny.build import ensure_tiny_world

    # A short warm-up keeps this fast; determinism does not depend on the step count.
    a = ensure_tiny_world(seed=3, cache_dir=tmp_path / "a", max_warmup_steps=20, log=lambda *_: None)
    b = ensure_tiny_world(seed=3, cache_dir=tmp_path / "b", max_warmup_steps=20, log=lambda *_: None)
    assert a.manifest["sha256"] == b.manifest["sha256"]
    assert set(a.manifest["sha256"]) == {"model/tokenizer.json", "model/model.safetensors",
                                         "data/train.jsonl", "data/val.jsonl"}
    c = ensure_tiny_world(seed=4, cache_dir=tmp_path / "c", max_warmup_steps=20, log=lambda *_: None)
    assert c.manifest["sha256"]["model/model.safetensors"] != a.manifest["sha256"]["model/model.safetensors"]


def test_warmup_accuracy_in_target_band(tiny_world):
    acc = tiny_world.manifest["warmup"]["accuracy"]
    assert 0.10 <= acc <= 0.50, acc


def test_seeded_requests_survive_a_full_token_budget_on_cpu(tiny_world, monkeypatch):
    """More seeded prompts than one step's token budget (4096 on CPU) holds: with chunked prefill the prompt
    that straddles the budget had its sampled token discarded and vLLM rewound its generator, which a CPU
    generator cannot do (RuntimeError: CPU Generator does not use offset), and a run's probe hung on it."""
    from vllm import SamplingParams

    from actors.config import ActorConfig
    from actors.engine import OWNER_ENV, build_llm

    for key in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "TOKENIZERS_PARALLELISM", OWNER_ENV):
        monkeypatch.setenv(key, "false" if key == "TOKENIZERS_PARALLELISM" else "")   # restored after the test
    llm = build_llm(ActorConfig(max_model_len=128), str(tiny_world.model_dir), seed=0, max_num_seqs=512)
    prompts = [f"Q: {i}+{i % 7}\nA: " for i in range(500)]          # ~5000 prompt tokens, lengths vary
    params = [SamplingParams(temperature=1.0, max_tokens=3, seed=1000 + i) for i in range(len(prompts))]
    outs = llm.generate(prompts, params, use_tqdm=False)
    del llm
    assert len(outs) == len(prompts) and all(len(o.outputs[0].token_ids) >= 1 for o in outs)
