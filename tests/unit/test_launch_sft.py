"""The SFT stage's pure parts: options, tokenization into training rows, the update plan.
(The training itself runs in tests/integration/test_skyt1.py, as the pipeline's first and third stage.)"""

import numpy as np
import pytest

from launch.recipes.sft.config import SftConfig, parse
from launch.recipes.sft.train import tokenize_examples, update_plan


def _cfg(**kw) -> SftConfig:
    return SftConfig(model_dir="m", train_path="d.jsonl", out="o", **kw)


def test_defaults_are_sky_t1s_and_options_parse():
    cfg = _cfg()
    assert (cfg.epochs, cfg.lr, cfg.batch_size) == (3.0, 1e-5, 96)
    got, print_only = parse(["--model_dir", "/m/123", "--train_path", "d", "--out", "o", "--lr", "2e-5",
                             "--render", "true"])
    assert not print_only and got.model_dir == "/m/123" and got.lr == 2e-5 and got.render is True
    with pytest.raises(SystemExit, match="did you mean --lr"):
        parse(["--lrr", "1"])
    with pytest.raises(SystemExit, match="missing|required"):
        parse(["--lr", "1e-5"])
    cfg, print_only = parse(["--print-config"])
    assert print_only and cfg.model_dir == "<required>"


def test_update_plan_covers_each_epoch_once_in_batches():
    cfg = _cfg(batch_size=4, epochs=2)
    plan = update_plan(10, cfg)
    assert [len(b) for b in plan] == [4, 4, 2, 4, 4, 2]
    assert sorted(sum(plan[:3], [])) == list(range(10)) and sorted(sum(plan[3:], [])) == list(range(10))
    assert plan[:3] != plan[3:]                                    # reshuffled per epoch, seeded
    assert plan == update_plan(10, cfg)
    assert len(update_plan(10, _cfg(batch_size=4, epochs=0.5))) == 2   # round(0.5 * 3)


def test_examples_become_rows_with_eos_and_response_only_targets(tiny_tokenizer):
    rows = [{"prompt": "Q: 1+2\nA: ", "response": "\\boxed{3}"}, {"prompt": "Q: 10+20\nA: ", "response": "x" * 50}]
    out, dropped = tokenize_examples(rows, tiny_tokenizer, _cfg(max_tokens=30))
    assert dropped == 1 and len(out) == 1
    r = out[0]
    assert r.prompt_ids.tolist() == tiny_tokenizer("Q: 1+2\nA: ", add_special_tokens=False)["input_ids"]
    assert r.response_ids[-1] == tiny_tokenizer.eos_token_id
    assert tiny_tokenizer.decode(r.response_ids[:-1]) == "\\boxed{3}"
    assert np.all(r.old_logprobs == 0) and r.loss_tokens == len(r.response_ids)
    with pytest.raises(ValueError, match="missing field"):
        tokenize_examples([{"prompt": "x"}], tiny_tokenizer, _cfg())
    with pytest.raises(ValueError, match="no usable example"):
        tokenize_examples(rows[1:], tiny_tokenizer, _cfg(max_tokens=30))


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    from launch.worlds.tiny.build import ensure_tiny_world
    return AutoTokenizer.from_pretrained(str(ensure_tiny_world().model_dir))

