"""Real-size shapes on CPU (launch/worlds/shapes): the shapes world has Qwen2.5-0.5B's architecture and a
151,936-token tokenizer; two learner steps of the full loop (vLLM actor, Redis, DeepSpeed
learner) run with 512-token responses inside the machine's memory, and every figure the README
reports is measured (bench/real_size_shapes.py, run as a user runs it).

    LAGRL_CACHE=... flock /tmp/lagrl-heavy.lock .venv/bin/python -m pytest -s -m slow tests/integration/test_shapes.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow            # builds the world once: ~30 s, 1 GB in $LAGRL_CACHE
def test_shapes_world_has_the_real_shapes(tmp_path):
    from tokenizers import decoders
    from transformers import AutoConfig, AutoTokenizer

    from launch.worlds.shapes.build import SPECIAL_TOKENS, VOCAB_SIZE, built_vocab, ensure_shapes_world

    world = ensure_shapes_world()
    config = AutoConfig.from_pretrained(world.model_dir)
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers, config.intermediate_size) == \
        (151_936, 896, 24, 4864)
    assert (config.num_attention_heads, config.num_key_value_heads, config.tie_word_embeddings) == (14, 2, True)
    assert world.manifest["parameters"] == 494_032_768              # Qwen2.5-0.5B's count
    tok = AutoTokenizer.from_pretrained(world.model_dir)
    assert len(tok) == 151_936 and tok.eos_token_id == 151_933
    ids = tok("Q: 12+34\nA: ")["input_ids"]
    assert tok.decode(ids) == "Q: 12+34\nA: " and max(ids) < 151_936
    # the whole range decodes to what the built vocabulary says: the last built id, then a byte symbol
    vocab = {i: token for token, i in built_vocab(VOCAB_SIZE - len(SPECIAL_TOKENS), seed=0)[0].items()}
    last = VOCAB_SIZE - len(SPECIAL_TOKENS) - 1
    assert tok.convert_ids_to_tokens(last) == vocab[last] and len(vocab[last]) >= 2
    expected = decoders.ByteLevel().decode([vocab[151_000], vocab[42]])
    assert tok.decode([151_000, 42]) == expected and len(expected) >= 2


@pytest.mark.slow
def test_shapes_run_fits_and_reports_its_figures(tmp_path):
    out = tmp_path / "shapes.json"
    subprocess.run([sys.executable, str(REPO / "bench" / "real_size_shapes.py"), "--steps", "2",
                    "--run_dir", str(tmp_path / "runs"), "--out", str(out)], cwd=REPO, check=True, timeout=1800)
    f = json.loads(out.read_text())
    assert f["model"]["vocab_size"] == 151_936 and f["run"]["steps"] == 2
    assert min(f["run"]["response_length_mean"]) >= 500          # a random policy runs to the 512 budget
    roles = {p["role"].split(" ")[0] for p in f["memory_gib"]["processes"]}
    assert roles == {"driver", "actor", "learner"}, f["memory_gib"]
    learner = next(p for p in f["memory_gib"]["processes"] if p["role"].startswith("learner"))
    assert 8.0 < learner["peak_rss"] < 20.0                        # fp32 weights + grads + AdamW = 7.4 GiB
    assert sum(p["peak_uss"] for p in f["memory_gib"]["processes"]) + f["memory_gib"]["object_store_growth"] < 22
    assert f["weight_sync"]["bytes"] == 494_032_768 * 4
    assert all(s > 0 for s in f["weight_sync"]["publish_s"]) and f["weight_sync"]["publish_to_served_s"]
    assert all(t > 0 for t in f["tokens_per_s"]["learner_per_step"])
    assert f["logprobs"]["chunk_tokens"] == 1024
    assert f["logprobs"]["path"] == "learner.logprobs.logprobs_and_entropy"     # the chunked one, not the naive one
