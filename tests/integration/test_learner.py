"""The DeepSpeed learner end to end on CPU: real DeepSpeed (gloo), Ray rank actors, real Redis.

One 1-rank group (ZeRO-0) serves every test; the 1-vs-2-rank test adds a 2-rank ZeRO-2 group
for its duration. The group saves its initial state once, so a test that needs version-0
weights restores it instead of paying for another engine. Synthetic groups: random token ids
from the tiny vocabulary, behaviour log-probs computed with the learner's current weights (so
ratios start at ~1), 0/1 rewards with variance inside each group.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from buffer.server import EmbeddedRedis
from buffer.telemetry import decode_metrics_entry
from learner.advantages import compute_advantages
from learner.batching import Row, collate, rows_from_groups
from learner.config import AdaptiveEntropy, PolicyLossConfig
from learner.errors import PolicyLagError
from learner.logprobs import logprobs_and_entropy
from learner.loss import PolicyLossInputs, policy_loss
from learner.trainer_config import LearnerConfig
from tests.integration.learner_setup import (
    GS,
    LR,
    learner_cfg,
    make_buffer,
    make_groups,
    make_learner,
    max_diff,
    set_weights,
    update_error,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """This module's redis-server, without fsync: the learner tests write many small entries."""
    with EmbeddedRedis(tmp_path_factory.mktemp("learner-redis"), appendfsync="no") as server:
        yield server.url


@pytest.fixture(scope="module")
def ranks(ray_local, tiny_world, tmp_path_factory):
    from learner.rank_actor import RankGroup
    group = RankGroup(learner_cfg(), tiny_world.model_dir, GS)
    group.init_ckpt = tmp_path_factory.mktemp("init-state") / "ckpt"
    group.call("save_checkpoint", str(group.init_ckpt), str(tiny_world.model_dir))
    yield group
    group.shutdown()


def mini_batch_loss(model, groups, cfg: LearnerConfig) -> torch.Tensor:
    """The learner's loss on ``groups`` as one mini-batch, computed with plain torch."""
    advs, masks = [], []
    for g in groups:
        res = compute_advantages(torch.tensor(g.rewards)[None], torch.tensor([r.length for r in g.responses])[None],
                                 torch.tensor([r.truncated for r in g.responses])[None], cfg.advantage)
        advs.append(res.advantages[0].numpy())
        masks.append(res.loss_mask[0].numpy())
    rows = rows_from_groups(groups, advs, masks)
    mb = collate(rows, list(range(len(rows))))
    logp, ent = logprobs_and_entropy(model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits,
                                     mb.targets, 1.0)
    inputs = PolicyLossInputs(logp, mb.old_logprobs, mb.advantages, mb.loss_mask, entropy=ent.detach())
    return policy_loss(inputs, cfg.loss, mb.num_loss_tokens, 0.0)[0]


# ------------------------------------------------------------------------------------------------
def test_one_update_changes_params_and_lowers_loss(ranks, tiny_world, redis_url, policy, run_dir):
    cfg = learner_cfg(lag="on_policy")
    buf = make_buffer(redis_url, "update")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    v0, before = learner.version, learner.full_state_dict()
    set_weights(policy, before)
    groups = make_groups(policy, 4, v0, seed=1)
    for g in groups:
        buf.put_group(g)
    m = learner.step()
    after = learner.full_state_dict()

    assert m["updates"] == 1 and m["version"] == v0 + 1 == ranks.version()
    assert m["ratio/mean"] == pytest.approx(1.0, abs=1e-4)          # behaviour log-probs = learner's
    assert all(not torch.equal(before[k], after[k]) for k in before), "every parameter tensor moves"
    with torch.no_grad():
        set_weights(policy, before)
        loss_before = float(mini_batch_loss(policy, groups, cfg))
        set_weights(policy, after)
        loss_after = float(mini_batch_loss(policy, groups, cfg))
    assert loss_after < loss_before - 1e-4, (loss_before, loss_after)
    assert buf.pending_groups(cfg.consumer) == []                    # checkpoint_every=0: ACKed after the step


def test_one_and_two_ranks_give_the_same_update(ranks, tiny_world, redis_url, policy, tmp_path):
    """Same global batch, 2 updates, many uneven micro-batches: 1 rank (ZeRO-0) == 2 ranks (ZeRO-2)
    == plain torch on the full mini-batch (AdamW, clip 1.0 on the full gradient)."""
    from learner.rank_actor import RankGroup

    assert ranks.call("load_checkpoint", str(ranks.init_ckpt)) == [0]      # version-0 weights and optimizer
    cfg1 = learner_cfg(lag="bounded:2", rollout_batch=4, mini_batch=2, shuffle=False,
                       micro_batch_tokens=24)
    cfg2 = cfg1.model_copy(update={"num_ranks": 2, "zero_stage": 2})
    init = ranks.call("full_state_dict")[0]
    set_weights(policy, init)
    groups = make_groups(policy, 4, 0, seed=2)

    # plain torch reference: update u trains groups [2u, 2u+1] (no shuffle)
    ref_norms = []
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg1.lr, betas=cfg1.betas, eps=cfg1.adam_eps,
                            weight_decay=cfg1.weight_decay)
    for u in range(2):
        opt.zero_grad()
        mini_batch_loss(policy, groups[2 * u:2 * u + 2], cfg1).backward()
        ref_norms.append(float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg1.grad_clip)))
        opt.step()
    reference = {k: v.detach().clone() for k, v in policy.named_parameters()}

    two = RankGroup(cfg2, tiny_world.model_dir, GS)
    try:
        results = {}
        for name, cfg, group in (("one", cfg1, ranks), ("two", cfg2, two)):
            buf = make_buffer(redis_url, f"dp-{name}")
            for g in groups:
                buf.put_group(g)
            learner = make_learner(cfg, buf, tiny_world, tmp_path / name, group)
            results[name] = (learner.step(), learner.full_state_dict())
    finally:
        two.shutdown()
    (m1, w1), (m2, w2) = results["one"], results["two"]
    assert m1["updates"] == m2["updates"] == 2 and m1["tokens/trained"] == m2["tokens/trained"]
    assert max(ref_norms) > cfg1.grad_clip                                  # clipping is exercised
    for m in (m1, m2):
        assert m["grad/norm"] == pytest.approx(np.mean(ref_norms), rel=1e-5)
        assert m["grad/norm_max"] == pytest.approx(max(ref_norms), rel=1e-5)
    # Adam makes near-zero gradient entries sensitive to summation order: compare whole updates
    # (a wrong micro-batch/rank weighting moves them by O(1) relative, not 1e-4) and bound every entry.
    for w in (w1, w2):
        assert update_error(w, reference, init) < 1e-3 and max_diff(w, reference) < 0.1 * LR
    assert update_error(w1, w2, init) < 1e-3


def test_on_policy_raises_on_lag(ranks, tiny_world, redis_url, policy, run_dir):
    cfg = learner_cfg(lag="on_policy")
    buf = make_buffer(redis_url, "onpolicy")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    set_weights(policy, learner.full_state_dict())
    if learner.version == 0:                                               # need a version to lag behind
        for g in make_groups(policy, 4, 0, seed=3):
            buf.put_group(g)
        learner.step()
    v = learner.version
    groups = make_groups(policy, 4, v, seed=4)
    groups[2].responses[1].version_start = groups[2].responses[1].version_end = v - 1   # one lag-1 sample
    for g in groups:
        g.step = learner.steps_done                      # issued for the step being trained
        buf.put_group(g)
    with pytest.raises(PolicyLagError, match="lag"):
        learner.step()
    assert ranks.version() == v                                            # nothing trained
    assert {g.group_id for _, g in buf.pending_groups(cfg.consumer)} >= {groups[2].group_id}  # not ACKed

    # the engine checks too, with its own version counter
    r = groups[0].responses[0]
    row = Row(groups[0].prompt_ids, r.token_ids, r.logprobs, 1.0, v - 1, v - 1, 0)
    with pytest.raises(PolicyLagError):
        ranks.call("train_updates", [row], [(v, [[0]], 0)], cfg.loss, 1.0, 0.0)
    assert ranks.version() == v


def test_off_policy_reuse_16_updates_lags_stale_and_zero_advantage(ranks, tiny_world, redis_url, policy, run_dir):
    from actors.transport.object_store import RayObjectStoreTransport

    cfg = learner_cfg(lag="bounded:2", rollout_batch=4, mini_batch=1, n_reuse=4, sync_interval=4,
                      loss=PolicyLossConfig(eps_low=0.2, eps_high=0.28))
    buf = make_buffer(redis_url, "reuse")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    v0 = learner.version
    set_weights(policy, learner.full_state_dict())
    valid = make_groups(policy, 4, v0, seed=5)
    zero = make_groups(policy, 1, v0, seed=6, rewards=[1.0] * GS)[0]
    valid[0].responses[1].version_end = v0 + 1          # weights changed while it was sampled
    for g in valid[:2] + [zero] + valid[2:]:
        buf.put_group(g)
    m = learner.step()
    assert m["updates"] == 16 and m["version"] == v0 + 16 == ranks.version()
    assert m["lag/straddled"] == 4                       # off-policy trains it (4 reuse passes) and reports it
    assert m["lag/hist"] == {str(k): GS for k in range(16)}               # update u trains one group at lag u
    assert m["lag/max"] == 15 and m["lag/mean"] == pytest.approx(7.5)
    assert m["groups/zero_adv_dropped"] == 1 and m["groups/read"] == 5 and m["lag/stale_dropped"] == 0
    version, location = buf.get_version()
    assert version == v0 + 16
    published = dict(RayObjectStoreTransport(buf.run_id).fetch(location))
    state = learner.full_state_dict()
    assert published.keys() == state.keys() and "model.layers.0.self_attn.q_proj.weight" in published
    assert max_diff(published, state) == 0.0
    # published at every multiple of 4 inside the step, and always at its end
    assert buf.client.xlen(buf.keys.versions) == 4 + int((v0 + 16) % 4 != 0)

    # step 2 starts at v0 + 16: a fully stale group and a half-stale one (lag 16 > max_lag 2)
    v1 = v0 + 16
    set_weights(policy, state)
    fresh = make_groups(policy, 4, v1, seed=7)
    stale = make_groups(policy, 1, v0, seed=8)[0]
    half = make_groups(policy, 1, v1, seed=9, rewards=[0.0, 1.0, 1.0, 0.0])[0]
    for r in half.responses[2:]:
        r.version_start = r.version_end = v0
    for g in [fresh[0], stale, half] + fresh[1:]:
        buf.put_group(g)
    m2 = learner.step()
    assert m2["lag/stale_dropped"] == GS + 2 and m2["groups/stale_dropped"] == 1
    assert m2["groups/trained"] == 4 and m2["groups/read"] == 5            # fresh[3] is left for the next step
    assert sum(m2["lag/hist"].values()) == 4 * (4 * GS) - 4 * 2            # the half group trains 2 responses
    assert max(int(k) for k in m2["lag/hist"]) == 15
    stale_letters = [d for d in buf.dead_letters() if d["reason"] == "stale"]
    assert len(stale_letters) == 2 and {d["source"] for d in stale_letters} == {"learner"}
    rows = [decode_metrics_entry(*e) for e in buf.client.xrange(buf.keys.metrics)]
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["lag/hist"] == m["lag/hist"]
    for key in ("entropy/mean", "entropy/coef", "reward/mean", "reward/accuracy", "length/mean", "length/max",
                "truncation/rate", "groups/zero_adv_dropped", "lag/mean", "lag/max", "lag/stale_dropped",
                "clip/low_frac", "clip/high_frac", "ratio/mean", "ratio/max", "grad/norm", "lr",
                "tokens/trained_per_s", "time/wait_data", "time/train", "time/weight_sync", "version", "mode"):
        assert key in rows[1], key


def test_groups_delivered_again_after_redis_forgot_are_never_retrained(ranks, tiny_world, redis_url, policy, run_dir):
    """A Redis restart past its fsync window can forget deliveries and ACKs: the same entries come
    back through XREADGROUP. Trained ones are skipped (ACKed as already_trained), never retrained."""
    from buffer.audit import audit

    cfg = learner_cfg(lag="bounded:4", checkpoint_every=2)
    buf = make_buffer(redis_url, "redeliver")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    set_weights(policy, learner.full_state_dict())
    first = make_groups(policy, 4, learner.version, seed=21)
    for g in first:
        buf.put_group(g)
    assert learner.step()["groups/trained"] == 4          # trained, not yet ACKed (checkpoint every 2)
    buf.client.xgroup_setid(buf.keys.groups, "learner", "0")   # the server "forgets" the deliveries
    set_weights(policy, learner.full_state_dict())
    second = make_groups(policy, 4, learner.version, seed=22)
    for g in second:
        buf.put_group(g)
    m = learner.step()                                     # reads first (again) then second
    assert m["groups/trained"] == 4 and m["groups/skipped_done"] == 4, m
    a = audit(buf.client, buf.run_id)                      # step 2 checkpointed: everything ACKed once
    assert a.outcomes["trained"] == 8 and a.duplicates == 0 and a.groups_open == 0, a.line()

    # forgets the ACKs and the consumed set too: all 8 come back past the buffer's own duplicate check
    buf.client.xgroup_setid(buf.keys.groups, "learner", "0")
    buf.client.delete(buf.keys.consumed)
    set_weights(policy, learner.full_state_dict())
    third = make_groups(policy, 4, learner.version, seed=23)
    for g in third:
        buf.put_group(g)
    m = learner.step()
    assert m["groups/trained"] == 4 and m["groups/skipped_done"] == 8, m
    a = audit(buf.client, buf.run_id)                      # third waits for its checkpoint
    assert a.outcomes["trained"] == 8 and a.outcomes["already_trained"] == 8 and a.duplicates == 0, a.line()


def test_future_versions_wait_or_are_dead_lettered(ranks, tiny_world, redis_url, policy, run_dir):
    """As after a restore: the buffer holds version v+2 published by a crashed learner, the learner
    is at v. A group sampled with v+2 waits until the learner gets there; one claiming a version
    nobody published is dead-lettered; intermediate versions are not published backwards."""
    cfg = learner_cfg(lag="bounded:4", rollout_batch=2, mini_batch=2)
    buf = make_buffer(redis_url, "future")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    v = learner.version
    buf.publish_version(v + 2, "ray://crashed-learner/0")
    set_weights(policy, learner.full_state_dict())
    ahead, corrupt = make_groups(policy, 1, v + 2, seed=11)[0], make_groups(policy, 1, v + 50, seed=12)[0]
    fresh = make_groups(policy, 5, v, seed=13)
    for g in [ahead, corrupt, *fresh]:
        buf.put_group(g)
    m1 = learner.step()
    assert m1["groups/read"] == 4 and m1["groups/trained"] == 2 and not buf.is_consumed(ahead.group_id)
    assert buf.get_version() == (v + 2, "ray://crashed-learner/0")        # v + 1 not published backwards
    assert [d["reason"] for d in buf.dead_letters()] == ["future_version"] and buf.is_consumed(corrupt.group_id)
    m2 = learner.step()                                                    # v+1: still too early for `ahead`
    assert m2["groups/trained"] == 2 and not buf.is_consumed(ahead.group_id)
    assert buf.get_version()[0] == v + 2 and buf.get_version()[1] != "ray://crashed-learner/0"
    m3 = learner.step()                                                    # v+2: `ahead` trains at lag 0
    assert buf.is_consumed(ahead.group_id) and m3["lag/hist"] == {"0": GS, "2": GS}   # ahead, fresh[4]


def test_recompute_old_logprobs_and_kl(ranks, tiny_world, redis_url, policy, run_dir):
    cfg = learner_cfg(lag="on_policy", old_logprobs="recompute", loss=PolicyLossConfig(kl_beta=1e-3))
    buf = make_buffer(redis_url, "recompute")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    set_weights(policy, ranks.call("full_state_dict")[0])
    for g in make_groups(policy, 4, learner.version, seed=10):
        for r in g.responses:
            r.logprobs = r.logprobs - 0.5          # behaviour log-probs are ignored in recompute mode
        buf.put_group(g)
    m = learner.step()
    assert m["ratio/mean"] == pytest.approx(1.0, abs=1e-4) and m["clip/low_frac"] == 0.0
    assert m["kl/mean"] >= 0.0 and np.isfinite(m["kl/mean"])


def test_resume_reproduces_the_next_step_exactly(ranks, tiny_world, redis_url, policy, run_dir, monkeypatch):
    """Checkpoint at step 2, crash after step 3: the restarted learner retrains step 3's pending
    groups to bit-identical weights. Crash between checkpoint 4 and its ACK: the restarted learner
    ACKs and skips the covered groups and trains only new ones."""
    cfg = learner_cfg(lag="bounded:8", rollout_batch=4, mini_batch=2, checkpoint_every=2,
                      entropy=AdaptiveEntropy(target=10.0, delta=1e-3, c_init=1e-3, c_max=1e-2))
    name = "resume"
    buf = make_buffer(redis_url, name)
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    v0 = learner.version
    set_weights(policy, learner.full_state_dict())
    batches = [make_groups(policy, 4, v0, seed=20 + s) for s in range(5)]
    for g in itertools.chain(*batches[:3]):
        buf.put_group(g)
    rows = learner.run(2)
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"
    m3 = learner.step()                                                    # not checkpointed
    # each next batch was taken (un-ACKed) while the step before trained: Admission.look_ahead
    assert [m["groups/read_ahead"] for m in rows + [m3]] == [0, 4, 4]
    w3 = learner.full_state_dict()
    assert {g.group_id for _, g in buf.pending_groups(cfg.consumer)} == {g.group_id for g in batches[2]}

    # "crash" after step 3; a new learner on the same run dir and consumer
    from buffer import RunBuffer
    buf2 = RunBuffer.from_url(redis_url, buf.run_id)
    resumed = make_learner(cfg, buf2, tiny_world, run_dir, ranks)
    assert resumed.version == v0 + 4 and resumed.steps_done == 2
    r3 = resumed.step()
    assert r3["version"] == m3["version"] and max_diff(resumed.full_state_dict(), w3) == 0.0
    for key in ("loss/total", "entropy/mean", "entropy/coef", "grad/norm", "ratio/mean"):
        assert r3[key] == m3[key], key

    # the HF checkpoint is loadable by transformers and has the tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer
    hf = run_dir / "checkpoints" / "step_000002" / "hf"
    assert AutoTokenizer.from_pretrained(str(hf)).vocab_size > 0
    AutoModelForCausalLM.from_pretrained(str(hf))

    # step 4 checkpoints (covers batches 2 and 3), then the ACK "crashes"
    for g in batches[3]:
        buf2.put_group(g)

    def boom(*a, **k):
        raise ConnectionError("learner died before ACK")
    monkeypatch.setattr(buf2, "ack_groups", boom)
    with pytest.raises(ConnectionError):
        resumed.step()
    w4 = resumed.full_state_dict()
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000004"

    from actors.transport.object_store import RayObjectStoreTransport
    from learner.loop import Learner
    again = Learner.from_url(cfg, buffer_url=redis_url, run_id=buf.run_id, model_dir=tiny_world.model_dir,
                             run_dir=run_dir, transport=RayObjectStoreTransport(buf.run_id), ranks=ranks,
                             temperature=1.0, group_size=GS)
    buf3 = again.buffer
    assert again.version == v0 + 8 and max_diff(again.full_state_dict(), w4) == 0.0
    for g in batches[4]:
        buf3.put_group(g)
    m5 = again.step()
    assert m5["groups/skipped_done"] == 8 and m5["groups/trained"] == 4 and m5["version"] == v0 + 10
    assert {g.group_id for _, g in buf3.pending_groups(cfg.consumer)} == {g.group_id for g in batches[4]}
    assert all(buf3.is_consumed(g.group_id) for g in itertools.chain(*batches[2:4]))
    again.close()                                        # final checkpoint covers and ACKs batch 4
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000005"
    assert buf3.pending_groups(cfg.consumer) == [] and all(buf3.is_consumed(g.group_id) for g in batches[4])
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == ["step_000004", "step_000005"]


def test_corrections_see_the_behaviour_logprobs(ranks, tiny_world, redis_url, policy, run_dir):
    """Recompute + truncated IS: pi_old is the learner's, mu the actors' (shifted here by -0.5, so
    pi_old / mu = e^0.5 = 1.65 on every token, under the cap C = 2): the loss is weighted by it and the
    behaviour mismatch is reported."""
    from learner.config import TruncatedIS

    cfg = learner_cfg(lag="bounded:4", old_logprobs="recompute",
                      loss=PolicyLossConfig(correction=TruncatedIS(cap=2.0)))
    buf = make_buffer(redis_url, "tis")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    set_weights(policy, ranks.call("full_state_dict")[0])
    for g in make_groups(policy, 4, learner.version, seed=11):
        for r in g.responses:
            r.logprobs = r.logprobs - 0.5
        buf.put_group(g)
    m = learner.step()
    assert m["ratio/mean"] == pytest.approx(1.0, abs=1e-4)                  # the clip sees pi_old = learner's
    assert m["correction/ratio/mean"] == pytest.approx(np.exp(0.5), rel=1e-3)
    assert m["correction/weight/mean"] == pytest.approx(np.exp(0.5), rel=1e-3) and m["correction/capped_frac"] == 0
    # k3 estimate of KL(mu || pi_old) on tokens sampled from mu: k - 1 - log k with k = pi_old / mu = e^0.5
    assert m["mismatch/behaviour_kl_k3"] == pytest.approx(np.exp(0.5) - 1 - 0.5, rel=1e-3)


def test_an_update_without_loss_tokens_is_not_an_update(ranks, tiny_world, redis_url, policy, run_dir):
    """Without dynamic sampling a zero-advantage group keeps its slot in the schedule with an empty loss
    mask. Its mini-batch is no update: no AdamW step on a zero gradient, no version; the later updates
    move up one version (their lags say so) and the feeder's clock is re-anchored. A step whose every
    mini-batch is empty trains nothing: version unchanged, entropy NaN (not 0), the controller untouched."""
    cfg = learner_cfg(lag="bounded:2", rollout_batch=4, mini_batch=1, shuffle=False,
                      dynamic_sampling=False, entropy=AdaptiveEntropy(target=10.0, delta=1e-3, c_max=1e-2))
    buf = make_buffer(redis_url, "empty")
    learner = make_learner(cfg, buf, tiny_world, run_dir, ranks)
    v0 = learner.version
    set_weights(policy, learner.full_state_dict())
    valid = make_groups(policy, 3, v0, seed=11)
    zero = make_groups(policy, 1, v0, seed=12, rewards=[1.0] * GS)[0]
    for g in (valid[0], zero, valid[1], valid[2]):                       # no shuffle: update u trains group u
        buf.put_group(g)
    m = learner.step()
    assert (m["updates"], m["updates_skipped_empty"], m["version"]) == (3, 1.0, v0 + 3) and ranks.version() == v0 + 3
    # updates at v0, (skipped), v0 + 1, v0 + 2 on groups sampled at v0: lags 0, 1, 2
    assert m["lag/hist"] == {"0": GS, "1": GS, "2": GS} and m["lag_start/hist"] == {"0": 3 * GS}
    assert np.isfinite(m["entropy/mean"]) and m["entropy/c"] == pytest.approx(1e-3)   # entropy < target 10
    assert buf.get_meta("learner_clock")["learner_clock"] == {
        "step": 1, "version": v0 + 3, "updates_per_step": 4, "max_lag": 2, "fixed_lag": None}

    before = learner.full_state_dict()
    for g in make_groups(policy, 4, v0 + 3, seed=13, rewards=[0.0] * GS):
        buf.put_group(g)
    m = learner.step()
    assert (m["updates"], m["updates_skipped_empty"], m["version"], m["tokens/trained"]) == (0, 4.0, v0 + 3, 0.0)
    assert math.isnan(m["entropy/mean"]) and math.isnan(m["grad/norm"])
    assert m["entropy/c"] == pytest.approx(1e-3)                         # no observation: c did not move
    assert ranks.version() == v0 + 3 and max_diff(learner.full_state_dict(), before) == 0.0
    assert buf.get_meta("learner_clock")["learner_clock"]["step"] == 2
