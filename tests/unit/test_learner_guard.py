"""Lag guard: every rule firing / not firing at its boundary, the hold, hysteresis, state round trip.

Thresholds are chosen so the boundary values are exact in binary floating point (0.125, 0.0625,
0.1 = 0.5 x 0.2), so "at the threshold" really is equality.
"""

import json
import math

import pytest
import torch
from pydantic import ValidationError

from learner.config import GuardConfig
from learner.guard import Decision, Guard, GuardEvent
from learner.guard_rules import (
    RULES,
    Baseline,
    clip_frac_rule,
    clip_limit,
    entropy_floor_rule,
    entropy_floors,
    entropy_slope_rule,
    evaluate,
    least_squares_slope,
    mismatch_kl_rule,
)
from learner.lag import ratio_stats

OFF = dict(entropy_floor=None, entropy_floor_start_frac=None, entropy_floor_target_frac=None,
           slope_max_drop_frac=None, mismatch_kl_max=None, clip_frac_max=None)


def _cfg(**kw) -> GuardConfig:
    """Every rule off unless turned on here."""
    return GuardConfig(enabled=True, **(OFF | kw))


def _ent(*values):
    return [{"entropy/mean": v} for v in values]


# --- slope ---------------------------------------------------------------------------------------

def test_least_squares_slope_hand_values():
    assert least_squares_slope([3.0, 1.0]) == -2.0
    # x = 0, 1, 2; mean y = 2; sum (x - 1)(y - 2) = (-1)(-1) + 0 + (1)(0) = 1; sum (x - 1)^2 = 2 -> 0.5
    assert least_squares_slope([1.0, 3.0, 2.0]) == 0.5
    assert least_squares_slope([0.7] * 5) == 0.0
    assert least_squares_slope([1.0, 0.9375, 0.875, 0.8125]) == -0.0625
    with pytest.raises(ValueError):
        least_squares_slope([1.0])


# --- entropy floor -------------------------------------------------------------------------------

def test_entropy_floor_highest_floor_binds_and_boundary_is_quiet():
    cfg = _cfg(entropy_floor=0.05, entropy_floor_start_frac=0.25, entropy_floor_target_frac=0.5, persist_steps=2)
    base = Baseline(start_entropy=0.5, entropy_target=0.2)
    assert entropy_floors(cfg, base) == {"entropy_floor": 0.05, "start_floor": 0.125, "target_floor": 0.1}
    assert entropy_floor_rule(_ent(0.4, 0.125, 0.125), cfg, base) is None        # at the floor: quiet
    fired = entropy_floor_rule(_ent(0.4, 0.124, 0.11), cfg, base)
    assert fired is not None and fired.rule == "entropy_floor"
    assert fired.values == {"entropy/mean": 0.11, "entropy/start": 0.5, "entropy/target": 0.2}
    assert fired.thresholds["start_floor"] == 0.125 and "start_floor" in fired.message


def test_entropy_floor_persistence_and_missing_inputs():
    cfg = _cfg(entropy_floor_target_frac=0.5, persist_steps=2)
    base = Baseline(entropy_target=0.2)                                  # floor 0.1
    assert entropy_floor_rule(_ent(0.3, 0.09), cfg, base) is None        # one step below: not yet
    assert entropy_floor_rule(_ent(0.3, 0.09), cfg, base, persist=1) is not None
    assert entropy_floor_rule(_ent(0.09), cfg, base) is None             # fewer rows than persist
    assert entropy_floor_rule(_ent(0.09, 0.09), cfg, base) is not None
    assert entropy_floor_rule(_ent(0.09, float("nan")), cfg, base) is None     # no evidence
    assert entropy_floor_rule([{"entropy/mean": 0.09}, {}], cfg, base) is None
    assert entropy_floor_rule(_ent(0.09, 0.09), cfg, Baseline()) is None       # no target, no floor
    assert entropy_floor_rule(_ent(0.0, 0.0), _cfg(slope_max_drop_frac=0.01), base) is None  # rule off


# --- entropy slope -------------------------------------------------------------------------------

def test_entropy_slope_boundary_window_and_start():
    cfg = _cfg(slope_max_drop_frac=0.0625, slope_window=4)
    base = Baseline(start_entropy=1.0)                                   # limit: -0.0625 / step
    at_limit = _ent(2.0, 1.0, 0.9375, 0.875, 0.8125)                     # last 4: slope exactly -0.0625
    assert entropy_slope_rule(at_limit, cfg, base) is None
    steeper = _ent(1.0, 0.875, 0.75, 0.625)                              # slope -0.125
    fired = entropy_slope_rule(steeper, cfg, base)
    assert fired is not None and fired.values["entropy/slope"] == -0.125
    assert fired.thresholds == {"slope_min": -0.0625, "slope_window": 4.0}
    assert entropy_slope_rule(steeper[1:], cfg, base) is None            # window not full
    assert entropy_slope_rule(steeper, cfg, Baseline()) is None          # starting entropy unknown
    # Relative to the start: the same curve is slow for a run that started at 4 nats (limit -0.25).
    assert entropy_slope_rule(steeper, cfg, Baseline(start_entropy=4.0)) is None


# --- mismatch KL and clip fraction ---------------------------------------------------------------

def test_mismatch_kl_boundary_persistence_and_key_preference():
    cfg = _cfg(mismatch_kl_max=0.125, persist_steps=2)
    base = Baseline()
    rows = [{"mismatch/kl_k3": 0.5}, {"mismatch/kl_k3": 0.125}]
    assert mismatch_kl_rule(rows, cfg, base) is None                     # at the threshold: quiet
    rows = [{"mismatch/kl_k3": 0.13}, {"mismatch/kl_k3": 0.2}]
    fired = mismatch_kl_rule(rows, cfg, base)
    assert fired.values == {"mismatch/kl_k3": 0.2} and fired.thresholds == {"mismatch/kl_k3": 0.125}
    assert mismatch_kl_rule(rows[-1:], cfg, base) is None                # one row, persist 2
    # The behaviour-vs-pi_old KL is preferred when the loss wrote it.
    both = [{"mismatch/kl_k3": 0.5, "mismatch/behaviour_kl_k3": 0.01}] * 2
    assert mismatch_kl_rule(both, cfg, base) is None
    both = [{"mismatch/kl_k3": 0.0, "mismatch/behaviour_kl_k3": 0.25}] * 2
    assert mismatch_kl_rule(both, cfg, base).values == {"mismatch/behaviour_kl_k3": 0.25}
    assert mismatch_kl_rule([], cfg, base) is None
    # Without it, the step's first update (the learner not yet moved) is preferred to the step mean.
    start = [{"mismatch/kl_k3": 0.5, "mismatch/start_kl_k3": 0.01}] * 2
    assert mismatch_kl_rule(start, _cfg(mismatch_kl_max=0.125, persist_steps=2), base) is None


def test_clip_frac_boundary_and_key():
    cfg = _cfg(clip_frac_max=0.0625, clip_frac_growth=None, persist_steps=1, clip_key="clip/high_frac")
    base = Baseline()
    assert clip_frac_rule([{"clip/high_frac": 0.0625}], cfg, base) is None
    assert clip_frac_rule([{"clip/high_frac": 0.07, "clip/frac": 0.0}], cfg, base).rule == "clip_frac"
    assert clip_frac_rule([{"clip/frac": 0.9}], cfg, base) is None       # reads only its key


def test_clip_frac_relative_to_the_runs_start():
    cfg = _cfg(clip_frac_max=0.0625, clip_frac_growth=2.0, persist_steps=2)
    # limit = max(0.0625, 2 x start): a reuse run that starts at 0.125 may clip up to 0.25 ...
    assert clip_limit(cfg, Baseline(start_clip=0.125)) == 0.25
    assert clip_frac_rule([{"clip/frac": 0.25}] * 2, cfg, Baseline(start_clip=0.125)) is None
    fired = clip_frac_rule([{"clip/frac": 0.375}] * 2, cfg, Baseline(start_clip=0.125))
    assert fired.thresholds == {"clip/frac": 0.25} and fired.values == {"clip/frac": 0.375, "clip/frac/start": 0.125}
    assert "(start 0.125)" in fired.message
    # ... one that starts near 0 fires above the absolute floor
    assert clip_limit(cfg, Baseline(start_clip=0.0)) == 0.0625
    assert clip_frac_rule([{"clip/frac": 0.07}] * 2, cfg, Baseline(start_clip=0.0)).rule == "clip_frac"
    # quiet while the start is unknown; off with clip_frac_max None
    assert clip_limit(cfg, Baseline()) is None and clip_frac_rule([{"clip/frac": 0.9}] * 2, cfg, Baseline()) is None
    assert clip_limit(_cfg(clip_frac_max=None, clip_frac_growth=2.0, mismatch_kl_max=0.125),
                      Baseline(start_clip=0.5)) is None


def test_guard_takes_the_clip_start_from_its_off_policy_steps_only():
    g = Guard(_cfg(mismatch_kl_max=0.125, clip_frac_max=0.0625, persist_steps=1, start_steps=2, hold_steps=1,
                   recover_quiet_steps=1))
    bad_kl = {"mismatch/kl_k3": 0.25, "clip/frac": 0.0}
    assert g.observe({"clip/frac": 0.125}).mode == "off_policy"
    assert g.observe(bad_kl).mode == "on_policy"        # fallback; start clip = (0.125 + 0) / 2
    assert g.start_clip == 0.0625
    g.observe({"clip/frac": 0.0})                        # on-policy step: not a start sample
    assert g.start_clip_samples == [0.125, 0.0]
    assert g.baseline == Baseline(None, None, 0.0625)


def test_evaluate_reports_every_firing_rule_in_order():
    cfg = _cfg(entropy_floor=0.5, mismatch_kl_max=0.01, clip_frac_max=0.01, clip_frac_growth=None, persist_steps=1)
    row = {"entropy/mean": 0.25, "mismatch/kl_k3": 0.5, "clip/frac": 0.5}
    assert [f.rule for f in evaluate([row], cfg, Baseline())] == ["entropy_floor", "mismatch_kl", "clip_frac"]
    assert evaluate([{"entropy/mean": 1.0, "mismatch/kl_k3": 0.0, "clip/frac": 0.0}], cfg, Baseline()) == []
    assert list(RULES) == ["entropy_floor", "entropy_slope", "mismatch_kl", "clip_frac"]


# --- the state machine ---------------------------------------------------------------------------

def _guard(**kw) -> Guard:
    cfg = _cfg(**({"mismatch_kl_max": 0.125, "persist_steps": 2, "hold_steps": 3, "recover_quiet_steps": 2,
                   "start_steps": 1} | kw))
    return Guard(cfg, entropy_target=0.2)


GOOD = {"entropy/mean": 0.5, "mismatch/kl_k3": 0.01, "entropy/coef": 0.0}
BAD = {"entropy/mean": 0.5, "mismatch/kl_k3": 0.25, "entropy/coef": 0.0}


def _modes(guard: Guard, rows) -> list[str]:
    return [guard.observe(r).mode for r in rows]


def test_disabled_guard_never_switches():
    g = Guard(GuardConfig())
    assert [g.observe(BAD) for _ in range(5)] == [Decision("off_policy")] * 5
    assert g.steps_seen == 0 and not g.history


def test_fallback_needs_persistence_and_emits_one_event():
    g = _guard()
    assert _modes(g, [GOOD, BAD, GOOD, BAD]) == ["off_policy"] * 4      # isolated bad steps
    d = g.observe(BAD | {"step": 41})                                    # second bad step in a row
    assert d.mode == "on_policy" and d.event is not None
    e = d.event
    assert (e.step, e.kind, e.from_mode, e.to_mode) == (41, "fallback", "off_policy", "on_policy")
    assert [f.rule for f in e.fired] == ["mismatch_kl"]
    assert e.fired[0].values == {"mismatch/kl_k3": 0.25} and e.fired[0].thresholds == {"mismatch/kl_k3": 0.125}
    assert e.values["entropy/start"] == 0.5 and e.values["entropy/target"] == 0.2
    assert "step 41: off_policy -> on_policy" in e.message() and "mismatch/kl_k3 0.25 > 0.125" in e.message()
    assert d.metrics["guard/on_policy"] == 1.0 and d.metrics["guard/fallbacks"] == 1.0
    assert d.metrics["guard/rule/mismatch_kl"] == 1.0 and d.metrics["guard/hold_left"] == 3.0
    d = g.observe(BAD)                                                   # still bad while on-policy:
    assert d.mode == "on_policy" and d.event is None                     # no new event
    assert json.loads(json.dumps(e.to_dict()))["rules"] == ["mismatch_kl"]


def test_hold_then_recover_when_quiet():
    g = _guard()
    _modes(g, [BAD, BAD])                                                # fallback at observed step 1
    decisions = [g.observe(GOOD) for _ in range(4)]
    # on-policy steps 1, 2, 3: the hold (3) ends at the third; quiet for 3 >= 2 -> recover there.
    assert [d.mode for d in decisions] == ["on_policy", "on_policy", "off_policy", "off_policy"]
    assert [d.metrics["guard/hold_left"] for d in decisions[:2]] == [2.0, 1.0]
    rec = decisions[2].event
    assert rec.kind == "recover" and rec.to_mode == "off_policy" and rec.fired == ()
    assert "3 on-policy steps" in rec.message()
    assert [e.kind for e in g.events] == ["fallback", "recover"]
    assert g.summary()["fallbacks"] == 1 and g.summary()["recoveries"] == 1


def test_hysteresis_a_single_bad_step_resets_the_quiet_streak():
    g = _guard(hold_steps=2, recover_quiet_steps=3)
    _modes(g, [BAD, BAD])                                                # fallback
    # on-policy: GOOD, GOOD (hold done, quiet 2 < 3), BAD (one step: would not trigger a fallback,
    # but resets the streak), GOOD, GOOD, GOOD -> back only after three clean steps in a row.
    modes = _modes(g, [GOOD, GOOD, BAD, GOOD, GOOD, GOOD])
    assert modes == ["on_policy"] * 5 + ["off_policy"]
    assert g.events[-1].kind == "recover" and g.quiet_steps == 3


def test_entropy_rules_in_the_guard_use_the_starting_entropy():
    g = Guard(_cfg(entropy_floor_start_frac=0.25, start_steps=2, persist_steps=1, hold_steps=1,
                   recover_quiet_steps=1), entropy_target=None)
    assert g.observe({"entropy/mean": 0.75}).mode == "off_policy" and g.start_entropy is None
    assert g.observe({"entropy/mean": 0.25}).mode == "off_policy"        # start = 0.5, floor 0.125
    assert g.start_entropy == 0.5
    assert g.observe({"entropy/mean": 0.125}).mode == "off_policy"       # at the floor
    d = g.observe({"entropy/mean": 0.12})
    assert d.mode == "on_policy" and d.event.fired[0].thresholds == {"start_floor": 0.125}
    assert g.observe({"entropy/mean": 0.3}).mode == "off_policy"         # hold 1, quiet 1


def test_slope_window_spans_the_fallback():
    # A collapse seen by the slope rule keeps firing on-policy until the window has levelled out.
    g = Guard(_cfg(slope_max_drop_frac=0.0625, slope_window=4, start_steps=1, hold_steps=1,
                   recover_quiet_steps=1))
    modes = _modes(g, _ent(1.0, 0.875, 0.75, 0.625))                     # slope -0.125: fallback
    assert modes[-1] == "on_policy"
    # flat from here: windows (0.875 .. 0.625, 0.625) slope -0.0875 still < -0.0625 -> stays;
    # (0.75, 0.625, 0.625, 0.625) slope -0.0375 -> quiet -> back.
    assert _modes(g, _ent(0.625, 0.625)) == ["on_policy", "off_policy"]


def test_state_round_trip_resumes_identically():
    rows = [GOOD, BAD, BAD, GOOD, BAD, GOOD, GOOD, GOOD, BAD, BAD, GOOD, GOOD, GOOD, GOOD]
    a = _guard()
    for r in rows[:5]:
        a.observe(r)
    state = json.loads(json.dumps(a.state_dict()))                       # JSON-safe, like a checkpoint
    b = _guard()
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    for i, r in enumerate(rows[5:]):
        da, db = a.observe(r, step=100 + i), b.observe(r, step=100 + i)
        assert da == db
    assert [e.to_dict() for e in a.events] == [e.to_dict() for e in b.events]
    assert [e.kind for e in b.events] == ["fallback", "recover", "fallback", "recover"]
    assert GuardEvent.from_dict(a.events[0].to_dict()) == a.events[0]


def test_version_1_state_loads_without_clip_samples():
    g = _guard()
    g.observe(GOOD)
    old = {k: v for k, v in g.state_dict().items() if k != "start_clip_samples"} | {"version": 1}
    h = _guard()
    h.load_state_dict(old)
    assert h.start_clip_samples == [] and h.start_samples == g.start_samples


def test_load_state_dict_rejects_foreign_state():
    g = _guard()
    with pytest.raises(ValueError, match="guard state"):
        g.load_state_dict({"mode": "on_policy"})
    bad = g.state_dict() | {"mode": "sideways"}
    with pytest.raises(ValueError, match="mode"):
        g.load_state_dict(bad)


def test_guard_config_validation_and_docs():
    for name, f in GuardConfig.model_fields.items():
        assert f.description, name
    with pytest.raises(ValidationError, match="every rule off"):
        GuardConfig(enabled=True, **OFF)
    GuardConfig(enabled=False, **OFF)                                    # off: allowed
    for bad in ({"hold_steps": 0}, {"slope_window": 2}, {"clip_frac_max": 1.5},
                {"entropy_floor_start_frac": 1.0}, {"mismatch_keys": ()}, {"clip_key": "clip/dual_frac"},
                {"clip_frac_growth": 1.0}):
        with pytest.raises(ValidationError):
            GuardConfig(**bad)
    d = GuardConfig()
    assert (d.enabled, d.entropy_floor_target_frac, d.slope_window, d.mismatch_kl_max, d.clip_frac_max,
            d.clip_frac_growth) == (False, 0.5, 20, 0.02, 0.05, 2.0)


def test_default_mismatch_threshold_sits_just_above_a_batch_at_the_clip_edge():
    """The anchor in guard_rules' docs, measured: every token at the clip edge rho = 1.2 gives the logged
    mismatch/kl_k3 = 0.2 - ln 1.2 = 0.01768, which the default 0.02 lets through; rho = 1.25 on every
    token (k3 = 0.25 - ln 1.25 = 0.02686) fires once it persists for persist_steps steps."""
    cfg = GuardConfig(enabled=True)
    for rho, fires in ((1.2, False), (1.25, True)):
        kl = ratio_stats(torch.full((2, 3), math.log(rho)), torch.zeros(2, 3), torch.ones(2, 3),
                         torch.ones(2, 3, dtype=torch.bool), 0.2, 0.2, total_tokens=6)["mismatch/kl_k3"]
        assert kl == pytest.approx(rho - 1 - math.log(rho), abs=1e-6)
        rows = [{"mismatch/kl_k3": kl}] * cfg.persist_steps
        assert (mismatch_kl_rule(rows, cfg, Baseline()) is not None) == fires, rho
        assert mismatch_kl_rule(rows[:1], cfg, Baseline()) is None          # one step is not enough


def test_a_step_that_trained_no_tokens_is_no_evidence():
    """Its entropy is NaN (nothing was measured), never 0: the guard neither fires on it nor records it,
    so it cannot count towards a collapse, a persistence streak, the slope window or the hold."""
    g = Guard(_cfg(entropy_floor=0.1, persist_steps=1, start_steps=1, hold_steps=1, recover_quiet_steps=1))
    assert g.observe({"entropy/mean": 0.5, "tokens/trained": 100.0}).mode == "off_policy"
    before = g.state_dict()
    empty = g.observe({"entropy/mean": float("nan"), "tokens/trained": 0.0})
    assert empty.mode == "off_policy" and empty.event is None and empty.metrics["guard/skipped_no_tokens"] == 1.0
    assert g.state_dict() == before
    # a real 0.05 nats with tokens behind it does fire
    assert g.observe({"entropy/mean": 0.05, "tokens/trained": 100.0}).event.kind == "fallback"
