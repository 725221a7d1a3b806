"""PRIME in the DeepSpeed learner on CPU: policy, implicit PRM and frozen reference are real models.

One 1-rank group with a PRM serves the module (synthetic groups as in ``test_learner``). Checked
against plain torch: the PRM's update (PRIME's cross-entropy, gradient normalised by the global
response count, its own AdamW and clip) and the policy's update with the per-token advantages
built from the updated PRM's process rewards. Also: the prompt filter ACKs out-of-band groups as
'filtered' in the audit's books, and a resumed PRIME learner restores both models exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from buffer.server import EmbeddedRedis
from learner.batching import collate, rows_from_groups
from learner.config import PrimeConfig
from learner.logprobs import logprobs_and_entropy
from learner.loss import PolicyLossInputs, policy_loss
from learner.prime import outcome_labels, prm_loss
from learner.prime_step import prime_token_advantages
from tests.integration.learner_setup import (
    GS,
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

PRM_LR = 1e-5


def prime_cfg(**kw):
    return learner_cfg(prime=PrimeConfig(prm_lr=PRM_LR), **kw)


@pytest.fixture(scope="module")
def prime_ranks(ray_local, tiny_world):
    from learner.rank_actor import RankGroup
    group = RankGroup(prime_cfg(), tiny_world.model_dir, GS)
    assert group.call("setup_prm", prime_cfg()) == [True]
    yield group
    group.shutdown()


def _fresh_model(tiny_world):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(tiny_world.model_dir), dtype=torch.float32)


def _logprobs(model, mb) -> torch.Tensor:
    out = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
    return logprobs_and_entropy(out, mb.targets, 1.0)[0]                                  # (B, L)


def _per_row(mb, values: torch.Tensor) -> list[np.ndarray]:
    return [values[b][mb.loss_mask[b]].detach().numpy() for b in range(values.shape[0])]


def test_prime_step_matches_plain_torch(prime_ranks, tiny_world, redis_url, policy, run_dir):
    """Filter at admission, one PRM update and one policy update with PRIME's token advantages,
    each equal to the same computation in plain torch."""
    from buffer.audit import audit

    cfg = prime_cfg(lag="on_policy", grad_clip=1.0)
    buf = make_buffer(redis_url, "prime")
    learner = make_learner(cfg, buf, tiny_world, run_dir, prime_ranks)
    assert learner.version == 0
    init = learner.full_state_dict()
    set_weights(policy, init)
    kept = make_groups(policy, 4, 0, seed=31)
    all_right = make_groups(policy, 1, 0, seed=32, rewards=[1.0] * GS)[0]
    all_wrong = make_groups(policy, 1, 0, seed=33, rewards=[0.0] * GS)[0]
    for g in [kept[0], all_right, kept[1], all_wrong, kept[2], kept[3]]:
        buf.put_group(g)
    m = learner.step()
    assert m["groups/filtered"] == 2 and m["prompts/filtered_frac"] == pytest.approx(2 / 6)
    assert m["groups/trained"] == 4 and m["groups/zero_adv_dropped"] == 0
    books = audit(buf.client, buf.run_id)
    assert books.outcomes["filtered"] == 2 and books.outcomes["trained"] == 4, books.line()

    # plain torch: the reference, the PRM update (AdamW, clip 10), then the policy update
    rows = rows_from_groups(kept, [np.zeros(GS)] * 4, [np.ones(GS, bool)] * 4)
    mb = collate(rows, list(range(len(rows))))
    ref_model, prm = _fresh_model(tiny_world).eval(), _fresh_model(tiny_world)
    with torch.no_grad():
        ref = _logprobs(ref_model, mb)
    labels = outcome_labels(torch.tensor([r.reward for r in rows], dtype=torch.float64))
    prm_opt = torch.optim.AdamW(prm.parameters(), lr=PRM_LR, betas=cfg.betas, eps=cfg.adam_eps, weight_decay=0.0)
    before = _logprobs(prm, mb)
    loss, held_out = prm_loss(before, ref, mb.loss_mask, labels, cfg.prime.beta)
    loss.backward()
    prm_norm = float(torch.nn.utils.clip_grad_norm_(prm.parameters(), cfg.prime.prm_grad_clip))
    prm_opt.step()
    prm_init = {k: v.detach().clone() for k, v in ref_model.named_parameters()}
    prm_ref = {k: v.detach().clone() for k, v in prm.named_parameters()}
    prm_ours = learner.prm_state_dict()
    assert update_error(prm_ours, prm_ref, prm_init) < 1e-3
    assert m["prm/grad_norm"] == pytest.approx(prm_norm, rel=1e-4)
    assert m["prm/loss"] == pytest.approx(held_out["prm/loss"], rel=1e-5)
    assert m["prm/loss"] == pytest.approx(np.log(2), rel=1e-5)      # PRM = reference before the update
    assert m["prm/accuracy"] == 0.0                                 # implicit reward 0 counts as wrong

    with torch.no_grad():
        after = _logprobs(prm, mb)
    advantages, has_baseline, pm = prime_token_advantages(rows, _per_row(mb, ref), _per_row(mb, before),
                                                          _per_row(mb, after), cfg.prime)
    assert m["process_reward/std"] == pytest.approx(pm["process_reward/std"], rel=1e-3)
    assert all(has_baseline)                                        # every group has several rows here
    for r, a in zip(rows, advantages):
        r.token_advantages = a
    mb = collate(rows, list(range(len(rows))))
    assert not torch.allclose(mb.advantages[0][mb.loss_mask[0]], mb.advantages[0][mb.loss_mask[0]].mean())
    set_weights(policy, init)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps, weight_decay=0.0)
    logp, ent = logprobs_and_entropy(policy(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits,
                                     mb.targets, 1.0)
    inputs = PolicyLossInputs(logp, mb.old_logprobs, mb.advantages, mb.loss_mask, entropy=ent.detach())
    policy_loss(inputs, cfg.loss, mb.num_loss_tokens, 0.0)[0].backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
    opt.step()
    reference = {k: v.detach().clone() for k, v in policy.named_parameters()}
    assert update_error(learner.full_state_dict(), reference, init) < 1e-3


def test_prime_resume_restores_policy_and_prm_exactly(prime_ranks, tiny_world, redis_url, policy, run_dir):
    """Checkpoint at step 2 (policy and PRM with their optimizers), crash after step 3: the resumed
    learner holds the step-2 weights of both models, and retrains step 3 to bit-identical weights."""
    from buffer import RunBuffer

    cfg = prime_cfg(lag="on_policy", checkpoint_every=2)
    buf = make_buffer(redis_url, "prime-resume")
    learner = make_learner(cfg, buf, tiny_world, run_dir, prime_ranks)
    v0 = learner.version
    states = []
    for s in range(3):     # on-policy: each batch is sampled by the version it is trained at
        set_weights(policy, learner.full_state_dict())
        for g in make_groups(policy, 4, learner.version, seed=40 + s):
            g.step = learner.steps_done
            buf.put_group(g)
        m = learner.step()
        states.append((m, learner.full_state_dict(), learner.prm_state_dict()))
    ckpt = run_dir / "checkpoints"
    assert (ckpt / "latest").read_text().strip() == "step_000002"
    assert (ckpt / "step_000002" / "prm" / "hf" / "model.safetensors").exists()
    assert (ckpt / "step_000002" / "prm" / "deepspeed" / "state").is_dir()

    resumed = make_learner(cfg, RunBuffer.from_url(redis_url, buf.run_id), tiny_world, run_dir, prime_ranks)
    assert resumed.steps_done == 2 and resumed.version == v0 + 2
    assert max_diff(resumed.full_state_dict(), states[1][1]) == 0.0
    assert max_diff(resumed.prm_state_dict(), states[1][2]) == 0.0
    r3 = resumed.step()                                           # step 3's groups are still pending
    m3, w3, p3 = states[2]
    assert max_diff(resumed.full_state_dict(), w3) == 0.0 and max_diff(resumed.prm_state_dict(), p3) == 0.0
    for key in ("loss/total", "prm/loss", "prm/accuracy", "prm/grad_norm", "process_reward/mean", "grad/norm"):
        assert r3[key] == m3[key], key

    # a checkpoint without the PRM is refused, naming what is missing (not a PRM silently back at its SFT weights)
    import shutil

    latest = ckpt / (ckpt / "latest").read_text().strip()
    shutil.rmtree(latest / "prm")
    with pytest.raises(Exception, match=r"has no PRM \(prm/\)"):
        make_learner(cfg, RunBuffer.from_url(redis_url, buf.run_id), tiny_world, run_dir, prime_ranks)
