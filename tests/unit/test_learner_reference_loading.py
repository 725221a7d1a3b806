"""The frozen reference loads whole while the policy's ZeRO-3 HfDeepSpeedConfig is alive."""

from transformers.integrations.deepspeed import (
    is_deepspeed_zero3_enabled,
    set_hf_deepspeed_config,
    unset_hf_deepspeed_config,
)

from learner.deepspeed_kit import without_zero3_init


class _Zero3Config:
    """Stands in for transformers' HfDeepSpeedConfig (which needs accelerate): what
    ``is_deepspeed_zero3_enabled`` reads of it."""

    def is_zero3(self) -> bool:
        return True


def test_reference_loading_suspends_zero3_init_and_restores_it():
    cfg = _Zero3Config()
    set_hf_deepspeed_config(cfg)
    try:
        assert is_deepspeed_zero3_enabled()              # the policy's from_pretrained is partitioned
        with without_zero3_init(cfg):
            assert not is_deepspeed_zero3_enabled()      # the reference's is not
        assert is_deepspeed_zero3_enabled()              # restored for the PRM's engine after it
        try:
            with without_zero3_init(cfg):
                raise RuntimeError("load failed")
        except RuntimeError:
            pass
        assert is_deepspeed_zero3_enabled()              # restored on errors too
    finally:
        unset_hf_deepspeed_config()


def test_without_a_config_nothing_is_set_afterwards():
    with without_zero3_init(None):
        assert not is_deepspeed_zero3_enabled()
    assert not is_deepspeed_zero3_enabled()
