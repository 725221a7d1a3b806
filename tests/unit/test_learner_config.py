"""Learner math configs: typed, bounded, documented, no unknown keys."""

import pytest
from pydantic import BaseModel, ValidationError

from learner.config import (
    AdaptiveEntropy,
    AdvantageConfig,
    BatchConfig,
    DecoupledPPO,
    FixedEntropy,
    GuardConfig,
    MaskedIS,
    NoCorrection,
    NoEntropy,
    PolicyLossConfig,
    TruncatedIS,
)

MODELS = [AdvantageConfig, PolicyLossConfig, AdaptiveEntropy, FixedEntropy, NoEntropy, BatchConfig,
          NoCorrection, TruncatedIS, MaskedIS, DecoupledPPO, GuardConfig]


@pytest.mark.parametrize("model", MODELS)
def test_every_field_documented_and_extra_forbidden(model: type[BaseModel]):
    for name, f in model.model_fields.items():
        assert name == "type" or f.description, f"{model.__name__}.{name} has no description"
    with pytest.raises(ValidationError):
        model(not_a_field=1)


@pytest.mark.parametrize("model, bad", [
    (PolicyLossConfig, {"eps_low": 1.0}), (PolicyLossConfig, {"eps_high": -0.1}),
    (PolicyLossConfig, {"dual_clip": 1.0}), (PolicyLossConfig, {"kl_beta": -1e-3}),
    (PolicyLossConfig, {"logprob_chunk_size": 0}),
    (AdvantageConfig, {"overlong_cache": 0}), (AdvantageConfig, {"truncation_mask": "sometimes"}),
    (AdvantageConfig, {"reward_scale": "ternary"}), (FixedEntropy, {"coef": -1.0}),
    (AdaptiveEntropy, {"c_init": 0.01}), (AdaptiveEntropy, {"c_min": 0.01, "c_max": 0.005}),
    (BatchConfig, {"mini_batch": 0}), (BatchConfig, {"n_reuse": 0}),
])
def test_bounds(model, bad):
    with pytest.raises(ValidationError):
        model(**bad)


def test_defaults_and_assignment_validation():
    loss = PolicyLossConfig()
    assert (loss.eps_low, loss.eps_high, loss.dual_clip, loss.kl_beta) == (0.2, 0.2, None, 0.0)
    adv = AdvantageConfig()
    assert (adv.truncation_mask, adv.reward_scale, adv.overlong_cache, adv.reject_zero_advantage) == \
        ("none", "binary", None, True)
    with pytest.raises(ValidationError):
        loss.eps_low = 2.0
    assert PolicyLossConfig.model_validate_json(loss.model_dump_json()) == loss
