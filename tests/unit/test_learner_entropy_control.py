"""Entropy coefficient variants; the Skywork adaptive controller over a scripted entropy sequence."""

import json

import pytest
from pydantic import TypeAdapter

from learner.config import AdaptiveEntropy, EntropyConfig, FixedEntropy, NoEntropy
from learner.entropy_control import (
    AdaptiveEntropyControl,
    FixedEntropyControl,
    NoEntropyControl,
    build_entropy_controller,
)

ENTROPIES = [0.30, 0.15, 0.10, 0.12, 0.18, 0.25, 0.20, 0.19]
SMALL = dict(target=0.2, delta=0.001, c_init=0.0, c_min=0.0, c_max=0.0025)


def test_adaptive_previous_step_timing():
    # alpha_k = c_k * 1{e_{k-1} <= 0.2}; after step k: c += 0.001 if e_k < 0.2 else -= 0.001, in [0, 0.0025].
    # k  alpha_k                      e_k   c_{k+1}
    # 0  c=0, no e yet -> 0           .30   clip(0 - .001) = 0
    # 1  c=0 -> 0                     .15   .001
    # 2  .001 * 1{.15<=.2} = .001     .10   .002
    # 3  .002                         .12   .003 -> clip .0025
    # 4  .0025                        .18   .0035 -> clip .0025
    # 5  .0025                        .25   .0015
    # 6  .0015 * 1{.25<=.2} = 0       .20   .0005 (.20 is not < .20)
    # 7  .0005 * 1{.20<=.2} = .0005   .19   .0015
    # 8  .0015
    ctl = AdaptiveEntropyControl(AdaptiveEntropy(**SMALL))
    alphas, cs = [], []
    for e in ENTROPIES:
        alphas.append(ctl.coef())
        ctl.update(e)
        cs.append(ctl.c)
    alphas.append(ctl.coef())
    assert alphas == pytest.approx([0, 0, 0.001, 0.002, 0.0025, 0.0025, 0, 0.0005, 0.0015], abs=1e-12)
    assert cs == pytest.approx([0, 0.001, 0.002, 0.0025, 0.0025, 0.0015, 0.0005, 0.0015], abs=1e-12)
    assert ctl.steps == 8 and ctl.metrics() == pytest.approx({"entropy/c": 0.0015, "entropy/coef": 0.0015, "entropy/target": 0.2})


def test_adaptive_current_batch_timing():
    # Same c sequence, but the indicator reads the entropy of the batch being trained on:
    # alpha_k = c_k * 1{e_k <= 0.2}: k=5 (e .25) -> 0; k=6 (e .20, c .0015) -> .0015.
    ctl = AdaptiveEntropyControl(AdaptiveEntropy(**SMALL, indicator="current_batch"))
    alphas = []
    for e in ENTROPIES:
        alphas.append(ctl.coef(current_entropy=e))
        ctl.update(e)
    assert alphas == pytest.approx([0, 0, 0.001, 0.002, 0.0025, 0, 0.0015, 0.0005], abs=1e-12)
    with pytest.raises(ValueError, match="current_batch"):
        ctl.coef()


def test_adaptive_c_init_used_before_first_observation():
    ctl = AdaptiveEntropyControl(AdaptiveEntropy(**{**SMALL, "c_init": 0.002}))
    assert ctl.coef() == 0.002


def test_state_dict_round_trip_resumes_identically():
    a = AdaptiveEntropyControl(AdaptiveEntropy(**SMALL))
    for e in ENTROPIES[:4]:
        a.update(e)
    state = json.loads(json.dumps(a.state_dict()))            # survives a JSON checkpoint
    b = AdaptiveEntropyControl(AdaptiveEntropy(**SMALL))
    b.load_state_dict(state)
    for e in ENTROPIES[4:]:
        assert a.coef() == b.coef()
        a.update(e)
        b.update(e)
    assert a.state_dict() == b.state_dict()
    with pytest.raises(ValueError):
        b.load_state_dict({"c": 0.0})


def test_fixed_and_none():
    fixed = FixedEntropyControl(FixedEntropy(coef=5e-4))
    fixed.update(0.01)
    assert fixed.coef() == 5e-4 and fixed.state_dict() == {}
    none = NoEntropyControl()
    none.update(3.0)
    assert none.coef() == 0.0 and none.metrics() == {"entropy/coef": 0.0}


def test_build_from_tagged_union():
    adapter = TypeAdapter(EntropyConfig)
    assert isinstance(build_entropy_controller(adapter.validate_python({"type": "adaptive"})), AdaptiveEntropyControl)
    assert build_entropy_controller(adapter.validate_python({"type": "fixed", "coef": 1e-2})).coef() == 1e-2
    assert isinstance(build_entropy_controller(NoEntropy()), NoEntropyControl)


def test_paper_and_script_defaults():
    cfg = AdaptiveEntropy()
    assert (cfg.target, cfg.delta, cfg.c_init, cfg.c_min, cfg.c_max) == (0.2, 1e-4, 0.0, 0.0, 0.005)
    assert cfg.indicator == "previous_step"


def test_non_finite_entropy_rejected():
    with pytest.raises(ValueError):
        AdaptiveEntropyControl(AdaptiveEntropy()).update(float("nan"))


def test_a_step_without_trained_tokens_leaves_the_controller_alone():
    # ENTROPIES with a token-less step (None) after 0.10: the c sequence and the alphas are exactly those
    # of the scripted run without it. Read as 0.0 it would have counted as a collapse (c += delta).
    ctl = AdaptiveEntropyControl(AdaptiveEntropy(**SMALL))
    for e in ENTROPIES[:3]:
        ctl.update(e)
    state = ctl.state_dict()
    ctl.update(None)
    assert ctl.state_dict() == state and ctl.coef() == pytest.approx(0.002)
    ctl.update(0.0)                                   # a measured 0 is a collapse: c moves up
    assert ctl.c == pytest.approx(0.0025)
    for stateless in (NoEntropyControl(), FixedEntropyControl(FixedEntropy(coef=0.01))):
        stateless.update(None)
        assert stateless.coef() in (0.0, 0.01)
