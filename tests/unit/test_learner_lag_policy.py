"""The lag policy union (learner.lag_policy): its string forms, what it is saved as, the old keys
(mode / max_lag / fixed_lag) folded into it for one release, and reading a dumped config of either age."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from learner.lag_policy import Bounded, Fixed, OnPolicy, Sync, lag_fields, lag_from
from learner.trainer_config import LearnerConfig


@pytest.mark.parametrize("text, member, view", [
    ("on_policy", OnPolicy(), ("on_policy", 0, None, 1)),
    ("sync", Sync(), ("off_policy", 0, None, 1)),              # generation lag 0, any updates per step
    ("bounded:16", Bounded(max_lag=16), ("off_policy", 16, None, 1)),
    ("fixed:4", Fixed(k=4), ("off_policy", 4, 4, 5)),
    ("fixed:0", Fixed(k=0), ("on_policy", 0, 0, 1)),          # fixed:0 is strict on-policy, named as a dose
])
def test_string_forms_members_and_the_old_views(text, member, view):
    assert lag_from(text) == member and str(member) == text and lag_from(member.model_dump()) == member
    cfg = LearnerConfig(lag=text)
    assert cfg.lag == member and (cfg.mode, cfg.max_lag, cfg.fixed_lag, cfg.versions_needed) == view
    saved = json.loads(cfg.model_dump_json())
    assert saved["lag"] == member.model_dump() and saved["lag"]["kind"] == text.split(":")[0]
    assert not {"mode", "max_lag", "fixed_lag"} & set(saved)              # stated once
    assert LearnerConfig.model_validate_json(cfg.model_dump_json()) == cfg


@pytest.mark.parametrize("text, message", [
    ("bounded:0", "bounded needs N >= 1 (lag 0 is --learner.lag on_policy)"),
    ("bounded", "write on_policy, sync, bounded:N (N >= 1) or fixed:k (k >= 0)"),
    ("sync:1", "write on_policy"),
    ("fixed:two", "write on_policy"),
    ("on_policy:1", "write on_policy"),
    ("off_policy", "write on_policy"),
    ("fixed:-1", "greater than or equal to 0"),
])
def test_bad_strings_say_the_forms(text, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LearnerConfig(lag=text)


@pytest.mark.parametrize("old, lag", [
    ({}, "on_policy"),
    ({"mode": "on_policy"}, "on_policy"),
    ({"mode": "on_policy", "max_lag": 0, "fixed_lag": None}, "on_policy"),        # an old config.json
    ({"mode": "off_policy", "max_lag": 4}, "bounded:4"),
    ({"mode": "off_policy", "max_lag": 16, "fixed_lag": None}, "bounded:16"),
    ({"fixed_lag": 0}, "fixed:0"),
    ({"mode": "on_policy", "max_lag": 0, "fixed_lag": 0}, "fixed:0"),
    ({"mode": "off_policy", "max_lag": 2, "fixed_lag": 2}, "fixed:2"),
    ({"fixed_lag": 2}, "fixed:2"),                                               # k brings its mode and bound
])
def test_old_keys_are_folded_into_the_lag(old, lag):
    cfg = LearnerConfig(**old)
    assert str(cfg.lag) == lag
    assert lag_fields(old) == lag_fields(cfg.model_dump(mode="json")) == \
        {"lag": lag, "mode": cfg.mode, "max_lag": cfg.max_lag, "fixed_lag": cfg.fixed_lag}


@pytest.mark.parametrize("lag, old, result", [
    ("bounded:16", {"max_lag": 4}, "bounded:4"),                  # --learner.max_lag 4 over a dumped preset
    ("on_policy", {"mode": "off_policy", "max_lag": 2}, "bounded:2"),
    ("bounded:1", {"mode": "on_policy", "max_lag": 0}, "on_policy"),
    ("on_policy", {"fixed_lag": 2, "mode": "off_policy", "max_lag": 2}, "fixed:2"),
    ("fixed:2", {"fixed_lag": None}, "bounded:2"),                # the dose off, the bound kept
    ("fixed:0", {"fixed_lag": None}, "on_policy"),
])
def test_old_keys_beside_a_lag_replace_their_part_of_it(lag, old, result):
    assert str(LearnerConfig(lag=lag, **old).lag) == result


@pytest.mark.parametrize("given, message", [
    ({"mode": "off_policy"}, "mode='off_policy': off-policy needs max_lag >= 1"),
    ({"max_lag": 3}, "max_lag=3: on-policy is lag 0 (--learner.lag on_policy); a bound of 3 is --learner.lag bounded:3"),
    ({"mode": "off_policy", "max_lag": 3, "fixed_lag": 2}, "fixed lag 2 needs mode off_policy with max_lag 2: "
                                                           "--learner.lag fixed:2"),
    ({"mode": "off_policy", "max_lag": 1, "fixed_lag": 0}, "fixed lag 0 is strict on-policy (mode on_policy, "
                                                           "max_lag 0): --learner.lag fixed:0"),
    ({"lag": "fixed:2", "max_lag": 3}, "max_lag=3 beside lag fixed:2: fixed lag 2 needs"),
    ({"mode": "sideways"}, "mode is 'on_policy' or 'off_policy'"),
    ({"fixed_lag": -1}, "fixed_lag must be an integer >= 0"),
    ({"max_lag": None}, "max_lag must be an integer >= 0"),
])
def test_contradicting_old_keys_are_refused_naming_the_new_setting(given, message):
    with pytest.raises(ValidationError) as exc:
        LearnerConfig(**given)
    text = str(exc.value)
    assert message in text and "The lag is one setting now: --learner.lag on_policy, sync, bounded:N" in text, text


def test_the_old_names_are_read_only_views():
    cfg = LearnerConfig(lag="fixed:3")
    for name in ("mode", "max_lag", "fixed_lag", "versions_needed"):
        with pytest.raises(AttributeError):
            setattr(cfg, name, 1)
    cfg.lag = "bounded:2"                              # assignment is validated like input
    assert (cfg.mode, cfg.max_lag, cfg.fixed_lag) == ("off_policy", 2, None)
    with pytest.raises(ValidationError, match="write on_policy"):
        cfg.lag = "sometimes"


def test_one_override_states_the_lag():
    from launch.config.overrides import ConfigError, apply_overrides
    from launch.config.presets import get_preset

    base = get_preset("baseline")
    assert str(apply_overrides(base, [("learner.lag", "fixed:4")]).learner.lag) == "fixed:4"
    reuse = apply_overrides(get_preset("offpolicy_reuse4"), [("learner.lag.max_lag", "8")])
    assert str(reuse.learner.lag) == "bounded:8"
    with pytest.raises(ConfigError, match=r"--learner.lag fixed:4 \(every token at update lag exactly 4\): needs one "
                                          r"update per step"):
        apply_overrides(get_preset("offpolicy_reuse4"), [("learner.lag", "fixed:4")])
    with pytest.raises(ConfigError, match="bounded needs N >= 1"):
        apply_overrides(base, [("learner.lag", "bounded:0")])
