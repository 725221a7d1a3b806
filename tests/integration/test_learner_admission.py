"""Admission against a real Redis: strict on-policy never trains a response that straddles a weight
update (its version_end differs from its version_start); it is dropped, counted and dead-lettered as
stale, and the rest of its group is trained (DESIGN.md §3, §8)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from buffer import RunBuffer
from buffer.audit import audit
from learner.admission import Admission, TrainedLedger
from learner.config import BatchConfig
from learner.modes import configured_mode, fallback_mode
from learner.trainer_config import LearnerConfig
from bench.synthetic import make_group

pytestmark = pytest.mark.integration


def _spans(g, spans):
    for r, (start, end) in zip(g.responses, spans):
        r.version_start, r.version_end = start, end
    for r, reward in zip(g.responses, (1.0, 0.0, 0.0, 1.0)):
        r.reward = reward
    return g


def test_strict_on_policy_drops_straddled_responses(redis_server):
    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    v = 3
    all_straddled = _spans(make_group("all", version=v, seed=1), [(v, v + 1)] * 4)
    clean = _spans(make_group("clean", version=v, seed=2), [(v, v)] * 4)
    half = _spans(make_group("half", version=v, seed=3), [(v, v), (v, v + 1), (v, v), (v, v + 1)])
    for g in (all_straddled, clean, half):
        buf.put_group(g)
    cfg = LearnerConfig(lag="on_policy", batch=BatchConfig(rollout_batch=2, mini_batch=2), block_ms=100,
                        data_timeout_s=30.0)
    col = Admission(cfg, buf, TrainedLedger(buf)).collect(version=v, step=v, mode=configured_mode(cfg))
    assert [g.group_id for _, g in col.entries] == ["clean", "half"]
    # half: responses 1 and 3 straddled v -> v+1; the rest (rewards 1, 0) is trained
    np.testing.assert_array_equal(col.loss_masks[1], [True, False, True, False])
    np.testing.assert_allclose(col.advantages[1][[0, 2]], [1 / np.sqrt(2), -1 / np.sqrt(2)], atol=1e-5)
    m = col.metrics()
    assert m["groups/stale_dropped"] == 1 and m["lag/stale_dropped"] == 4 + 2 and m["groups/trained"] == 2
    letters = [d for d in buf.dead_letters() if d["reason"] == "stale"]
    assert len(letters) == 2 and all("straddle a weight update" in d["detail"] for d in letters)
    assert any("versions 3->4" in d["detail"] and "group dropped" in d["detail"] for d in letters)
    assert audit(buf.client, buf.run_id).outcomes["stale"] == 1    # the fully straddled group, ACKed 'stale'


@pytest.mark.parametrize("fallback", [False, True], ids=["off_policy", "guard_fallback"])
def test_off_policy_trains_straddled_responses_the_guard_fallback_does_not(redis_server, fallback):
    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    v = 5
    half = _spans(make_group("half", version=v, seed=3), [(v, v), (v, v + 1), (v, v), (v, v + 1)])
    buf.put_group(half)
    cfg = LearnerConfig(lag="bounded:2", batch=BatchConfig(rollout_batch=1, mini_batch=1),
                        loss={"eps_low": 0.2, "eps_high": 0.28}, block_ms=100, data_timeout_s=30.0)
    mode = fallback_mode(cfg) if fallback else configured_mode(cfg)
    col = Admission(cfg, buf, TrainedLedger(buf)).collect(version=v, step=v, mode=mode)
    assert [g.group_id for _, g in col.entries] == ["half"]
    want = [True, False, True, False] if fallback else [True] * 4
    np.testing.assert_array_equal(col.loss_masks[0], want)
    assert col.metrics()["lag/stale_dropped"] == (2 if fallback else 0)


@pytest.mark.parametrize("fallback", [False, True], ids=["off_policy", "guard_fallback"])
def test_guard_fallback_drops_groups_beyond_its_lag_bound_and_counts_them(redis_server, fallback):
    """A group sampled one version back (lag 1, nothing straddled) is trained in the configured
    off-policy mode (max_lag 2) and dropped whole, counted as stale, once the guard holds lag 0."""
    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    v = 5
    buf.put_group(_spans(make_group("old", version=v - 1, seed=4), [(v - 1, v - 1)] * 4))
    buf.put_group(_spans(make_group("fresh", version=v, seed=5), [(v, v)] * 4))
    cfg = LearnerConfig(lag="bounded:2", batch=BatchConfig(rollout_batch=1, mini_batch=1),
                        loss={"eps_low": 0.2, "eps_high": 0.28}, block_ms=100, data_timeout_s=30.0)
    mode = fallback_mode(cfg) if fallback else configured_mode(cfg)
    col = Admission(cfg, buf, TrainedLedger(buf)).collect(version=v, step=v, mode=mode)
    assert [g.group_id for _, g in col.entries] == (["fresh"] if fallback else ["old"])
    assert col.metrics()["lag/stale_dropped"] == (4 if fallback else 0)


def test_fixed_lag_trains_exactly_k_behind_defers_later_steps_and_drops_staler(redis_server):
    """k = 2, learner at version 5: only responses sampled with version 3 are trained. A group of a
    later step (version 4, lag 1) waits un-ACKed and is trained at version 6; staler responses
    (version 2, lag 3) and straddled ones are dropped as stale; a group with both keeps the rest."""
    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    v, k = 5, 2
    later = _spans(make_group("later", version=4, seed=1), [(4, 4)] * 4)
    stale = _spans(make_group("stale", version=2, seed=2), [(2, 2)] * 4)
    exact = _spans(make_group("exact", version=3, seed=3), [(3, 3)] * 4)
    mixed = _spans(make_group("mixed", version=3, seed=4), [(3, 3), (2, 2), (3, 3), (3, 4)])
    later2 = _spans(make_group("later2", version=4, seed=6), [(4, 4)] * 4)
    for g in (later, stale, exact, mixed, later2):
        buf.put_group(g)
    cfg = LearnerConfig(lag=f"fixed:{k}", batch=BatchConfig(rollout_batch=2, mini_batch=2),
                        block_ms=100, data_timeout_s=30.0)
    mode = configured_mode(cfg)
    admission = Admission(cfg, buf, TrainedLedger(buf))
    col = admission.collect(version=v, step=v, mode=mode)
    assert [g.group_id for _, g in col.entries] == ["exact", "mixed"]
    # mixed: response 1 is 3 behind, response 3 straddles 3 -> 4; responses 0 and 2 (rewards 1, 0) train
    np.testing.assert_array_equal(col.loss_masks[1], [True, False, True, False])
    m = col.metrics()
    assert m["groups/stale_dropped"] == 1 and m["lag/stale_dropped"] == 4 + 2 and m["groups/read"] == 4
    assert {g.group_id for _, g in buf.pending_groups(cfg.consumer)} >= {"later"}        # waits, not ACKed
    assert audit(buf.client, buf.run_id).outcomes["stale"] == 1                          # the stale group
    letters = [d["detail"] for d in buf.dead_letters() if d["reason"] == "stale"]
    assert any("lags [3] > the fixed lag 2 at version 5" in d and "group dropped" in d for d in letters), letters
    # one version later the waiting group is exactly k behind: trained first, then the next one read
    col = admission.collect(version=v + 1, step=v + 1, mode=mode)
    assert [g.group_id for _, g in col.entries] == ["later", "later2"] and col.metrics()["groups/read"] == 2
    # the ramp-in: at version 1 the data can only be from version 0, one behind
    ramp = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    for i in range(2):
        ramp.put_group(_spans(make_group(f"v0-{i}", version=0, seed=5 + i), [(0, 0)] * 4))
    col = Admission(cfg, ramp, TrainedLedger(ramp)).collect(version=1, step=1, mode=mode)
    assert [g.group_id for _, g in col.entries] == ["v0-0", "v0-1"]


def test_a_stop_while_waiting_for_data_interrupts_the_step_and_keeps_what_it_read(redis_server):
    """``ray job stop`` while a step waits for groups that may never come (a starved or stuck run): the
    step ends after the next empty read, nothing is trained, and the group it had admitted is taken
    first by the next collect (it stays pending in the learner's consumer, so a resumed run reads it)."""
    import time

    from learner.errors import StepInterrupted

    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    v = 2
    buf.put_group(_spans(make_group("first", version=v, seed=1), [(v, v)] * 4))
    cfg = LearnerConfig(lag="on_policy", batch=BatchConfig(rollout_batch=2, mini_batch=2), block_ms=100,
                        data_timeout_s=30.0)
    admission = Admission(cfg, buf, TrainedLedger(buf))
    asked = []
    t0 = time.monotonic()
    with pytest.raises(StepInterrupted, match="1/2 valid groups"):
        admission.collect(version=v, step=v, mode=configured_mode(cfg), should_stop=lambda: asked.append(1) or True)
    assert len(asked) == 1 and time.monotonic() - t0 < 5.0            # one empty read, not data_timeout_s
    resumed = RunBuffer.from_url(redis_server.url, buf.run_id)         # what a restarted learner would see
    assert [g.group_id for _, g in resumed.pending_groups(cfg.consumer)] == ["first"]
    buf.put_group(_spans(make_group("second", version=v, seed=2), [(v, v)] * 4))
    col = admission.collect(version=v, step=v, mode=configured_mode(cfg))
    assert [g.group_id for _, g in col.entries] == ["first", "second"]


def _rewards(g, rewards):
    for r, reward in zip(g.responses, rewards):
        r.reward = reward
    return g


def test_look_ahead_reports_the_next_steps_losses_while_training_and_acks_nothing(redis_server, monkeypatch):
    """Off-policy, while step 4 trains (its update brings version 5), the next batch is being written: the
    look ahead takes it into the backlog un-ACKed, reports the groups step 5's admission will lose (one
    with equal rewards, one staler than max_lag) to the feeder at once, stops taking once D_R are
    expected to be trained, and step 5's collect then admits exactly what it took, losses and all,
    with the advantages the look ahead computed (not computed twice)."""
    import learner.admission as admission_module

    scored = []
    compute = admission_module.compute_advantages
    monkeypatch.setattr(admission_module, "compute_advantages", lambda *a, **k: scored.append(1) or compute(*a, **k))
    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    v = 5
    cfg = LearnerConfig(lag="bounded:1", batch=BatchConfig(rollout_batch=3, mini_batch=3),
                        loss={"eps_low": 0.2, "eps_high": 0.28}, block_ms=100, data_timeout_s=30.0)
    assert cfg.dynamic_sampling
    mode = configured_mode(cfg)
    admission = Admission(cfg, buf, TrainedLedger(buf))
    buf.put_group(_rewards(make_group("zero", version=v - 1, step=v, seed=1), [1.0] * 4))
    buf.put_group(make_group("old", version=v - 2, step=v - 1, seed=2))    # lag 2 at version 5
    buf.put_group(make_group("a", version=v - 1, step=v, seed=3))
    buf.put_group(make_group("b", version=v - 1, step=v, seed=4))
    admission.look_ahead(step=v, version=v, mode=mode)

    need = buf.get_meta("learner_need")["learner_need"]
    assert (need["step"], need["lost"], need["groups"]) == (v, 2, 1)     # 2 expected trained of D_R 3
    assert audit(buf.client, buf.run_id).groups_consumed == 0              # nothing ACKed ahead
    assert len(buf.pending_groups(cfg.consumer)) == 4                      # taken: a restarted learner has them

    buf.put_group(make_group("c", version=v, step=v, seed=5))
    buf.put_group(make_group("d", version=v, step=v, seed=6))
    admission.look_ahead(step=v, version=v, mode=mode)
    assert len(buf.pending_groups(cfg.consumer)) == 5                      # "c" fills D_R: "d" is left in the stream

    assert len(scored) == 4                          # "zero", "a", "b", "c": "old" has no response fresh enough
    col = admission.collect(version=v, step=v, mode=mode)
    assert [g.group_id for _, g in col.entries] == ["a", "b", "c"] and len(scored) == 4
    m = col.metrics()
    assert (m["groups/read_ahead"], m["groups/zero_adv_dropped"], m["groups/stale_dropped"], col.lost) == (5, 1, 1, 2)
    books = audit(buf.client, buf.run_id).outcomes
    assert (books["filtered"], books["stale"]) == (1, 1)
    need = buf.get_meta("learner_need")["learner_need"]
    assert need["groups"] == 0 and need["collected"] == {"step": v, "lost": 2}   # the feeder's rejection rate


def test_look_ahead_leaves_strict_on_policy_to_collect(redis_server):
    """Strict on-policy generates nothing for the next step while one trains; what is written then is an
    earlier step's surplus, which collect drops as stale: the look ahead takes nothing."""
    buf = RunBuffer.from_url(redis_server.url, f"adm-{uuid.uuid4().hex[:6]}")
    buf.put_group(make_group("late", version=2, step=2, seed=1))
    cfg = LearnerConfig(lag="on_policy", batch=BatchConfig(rollout_batch=2, mini_batch=2), block_ms=100)
    Admission(cfg, buf, TrainedLedger(buf)).look_ahead(step=3, version=3, mode=configured_mode(cfg))
    assert buf.pending_groups(cfg.consumer) == [] and buf.get_meta("learner_need") == {}
