"""The science report's worlds come from the registry (launch.config.worlds): a world registered with
``science=True`` is a ``--world`` choice and may be a finding's world; one with an ``entropy_split`` keeps a
``final_model`` finding's final weights, and its runs are split."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launch.config.worlds import WORLDS


@pytest.fixture
def fake_world(monkeypatch) -> str:
    """A world registered as a user would add one (the tiny world's parts under another name)."""
    monkeypatch.setitem(WORLDS, "fake", replace(WORLDS["tiny"], science=True, entropy_split="fake.entropy_split",
                                                help="a fake world"))
    return "fake"


def test_a_registered_science_world_is_a_choice_of_the_report(fake_world):
    from launch.experiments.science.__main__ import parser
    from launch.experiments.science.findings import science_worlds

    assert science_worlds() == ("tiny", "reasoning", "routes", "slips", fake_world)
    assert parser().parse_args(["--world", fake_world]).world == fake_world


def test_a_world_without_science_is_not_offered(capsys):
    from launch.experiments.science.__main__ import parser
    from launch.experiments.science.findings import science_worlds

    assert {"code", "shapes"} <= set(WORLDS) and not {"code", "shapes"} & set(science_worlds())
    with pytest.raises(SystemExit):
        parser().parse_args(["--world", "code"])
    assert "invalid choice: 'code'" in capsys.readouterr().err


def test_a_finding_runs_in_a_science_world_only(fake_world):
    from launch.experiments.science.findings import FINDINGS, finding, science_worlds

    assert {f.world for f in FINDINGS} <= set(science_worlds())
    assert replace(finding("reuse"), world=fake_world).world == fake_world
    with pytest.raises(ValueError, match="not a science world"):
        replace(finding("reuse"), world="shapes")


def test_a_world_with_an_entropy_split_keeps_the_final_weights_and_splits_them(fake_world, monkeypatch):
    from launch.experiments.science.__main__ import fair_overrides
    from launch.experiments.science.findings import finding
    from launch.experiments.science.runner import entropy_split_of, spec_for, splits_entropy

    reuse, temperature = finding("reuse"), finding("temperature")        # final_model, and not
    assert entropy_split_of(fake_world) == "fake.entropy_split" and entropy_split_of(None) is None
    fair = fair_overrides([reuse, temperature], fake_world, 20)
    assert fair["reuse"][-2:] == ("--learner.checkpoint_every", "20")
    assert "--learner.checkpoint_every" not in fair["temperature"]
    f = replace(reuse, overrides=fair["reuse"])
    assert splits_entropy(spec_for(f, f.arms[1], 0, 20, fake_world))
    assert not splits_entropy(spec_for(f, f.arms[1], 0, 20, "slips"))   # a science world without a split

    monkeypatch.setitem(WORLDS, fake_world, replace(WORLDS[fake_world], entropy_split=None))
    assert "--learner.checkpoint_every" not in fair_overrides([reuse], fake_world, 20)["reuse"]
