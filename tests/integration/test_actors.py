"""GenerationActor against real vLLM (CPU), a real redis-server and real Ray.

One module-scoped pair of actors serves every test (engine start-up dominates the cost); each
test uses its own run id, so streams never mix.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid

import numpy as np
import pytest
import ray
import torch

from actors.config import ActorConfig
from actors.factory import create_generation_actors, fan_out, start_loops
from actors.transport.object_store import RayObjectStoreTransport
from buffer import PromptMsg, RunBuffer
from buffer.config import BufferConfig
from rewards.result import SandboxUnavailable
from rewards.scoring import score_group
from rewards.workers import RewardPool
from tests.integration.actor_io import arith_prompts, collect_groups
from tests.integration.reward_faults import FAST_LIMITS, HANG, StallingPool

pytestmark = pytest.mark.integration

RECLAIM_MS = 1500


@pytest.fixture(scope="module")
def hf_model(tiny_world):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_world.model_dir).eval()


def _cfg(**kw) -> ActorConfig:
    base = dict(num_actors=1, max_model_len=256, max_prompts_in_flight=8,
                heartbeat_s=0.5, idle_poll_ms=100, num_cpus=1)
    return ActorConfig(**{**base, **kw})


def _buffer(url: str, run_id: str) -> RunBuffer:
    return RunBuffer.from_url(url, run_id, BufferConfig(reclaim_idle_ms=RECLAIM_MS))


@pytest.fixture(scope="module")
def actor_run(ray_local, redis_url, tiny_world):
    """One run id and one actor for the shape / log-prob / weight-update / admission tests."""
    run_id = f"act-{uuid.uuid4().hex[:6]}"
    [actor] = create_generation_actors(_cfg(), run_id, redis_url, str(tiny_world.model_dir), group_size=4)
    loop = start_loops([actor])
    # The learner's transport owns the weight store; keep it alive for the module like a learner would.
    yield run_id, actor, RayObjectStoreTransport(run_id)
    fan_out([actor], "stop")
    ray.get(loop, timeout=60)
    ray.kill(actor)


def _assert_logprobs_match(model, group, temperature=1.0, atol=2e-3):
    """Behaviour log-probs == transformers' log-softmax(logits / τ) under the same weights."""
    for r in group.responses:
        ids = torch.tensor(np.concatenate([group.prompt_ids, r.token_ids]))[None].long()
        with torch.no_grad():
            logits = model(ids).logits[0, len(group.prompt_ids) - 1:-1]            # (L, V)
        ref = torch.log_softmax(logits.float() / temperature, -1)
        ref = ref.gather(-1, ids[0, len(group.prompt_ids):, None])[:, 0]
        np.testing.assert_allclose(r.logprobs, ref.numpy(), atol=atol)


def test_ray_workers_run_at_normal_priority(ray_local):
    """Not at Ray's default nice 15, where any normal-priority process on the node starves them
    (actors.cluster.priority): under two spinning processes an engine then took minutes to start."""
    assert ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote()) == 0


def test_prompts_in_groups_out_with_behaviour_logprobs(actor_run, redis_url, tok, hf_model):
    run_id, actor, _ = actor_run
    buf = _buffer(redis_url, run_id)
    buf.put_prompts(arith_prompts(tok, run_id, [(12, 7), (3, 41), (25, 25)]))
    groups = collect_groups(buf, 3)
    assert sorted(g.group_id for g in groups) == [f"{run_id}-{i}" for i in range(3)]
    for g in groups:
        assert len(g.responses) == 4 and g.actor_id.startswith("lagrl-gen-")
        for r in g.responses:
            assert r.token_ids.dtype == np.int32 and r.token_ids.shape == r.logprobs.shape
            assert 1 <= r.length <= 12
            assert r.finish_reason in ("stop", "length")
            assert r.truncated == (r.finish_reason == "length")
            assert r.version_start == r.version_end == 0
            assert r.reward in (0.0, 1.0) and r.reward_info["reason"]
        # the reward is the verdict on exactly these tokens' text (the actor decodes them itself)
        texts = [tok.decode(r.token_ids.tolist(), skip_special_tokens=True) for r in g.responses]
        assert [(r.reward, r.reward_info["reason"]) for r in g.responses] == \
            [(x.reward, x.reason) for x in score_group(texts, g.answer, g.data_source)]
        _assert_logprobs_match(hf_model, g)
    status = ray.get(actor.status.remote())
    assert status["prompts_done"] >= 3 and status["tokens_per_s"] > 0 and not status["last_error"]


def test_behaviour_logprobs_are_at_the_sampling_temperature(actor_run, redis_url, tok, hf_model):
    """tau = 0.6 (a preset's tau): the behaviour log-probs are log-softmax(logits / tau), the
    distribution actually sampled and the one the learner scores (learner.logprobs), not vLLM's
    raw tau = 1 log-probs (logprobs_mode='processed_logprobs'). Before any weight update."""
    run_id, _, _ = actor_run
    buf = _buffer(redis_url, run_id)
    prompts = arith_prompts(tok, f"{run_id}-tau", [(4, 9), (30, 2)])
    for p in prompts:
        p.temperature = 0.6
    buf.put_prompts(prompts)
    groups = collect_groups(buf, 2)
    assert len(groups) == 2
    raw_gap = 0.0
    for g in groups:
        _assert_logprobs_match(hf_model, g, temperature=0.6)
        for r in g.responses:      # the tau = 1 reading must be told apart from the tau = 0.6 one
            ids = torch.tensor(np.concatenate([g.prompt_ids, r.token_ids]))[None].long()
            with torch.no_grad():
                logits = hf_model(ids).logits[0, len(g.prompt_ids) - 1:-1].float()
            raw = torch.log_softmax(logits, -1).gather(-1, ids[0, len(g.prompt_ids):, None])[:, 0]
            raw_gap = max(raw_gap, float(np.abs(r.logprobs - raw.numpy()).max()))
    assert raw_gap > 2e-2


def test_weight_update_changes_generations_and_version(actor_run, redis_url, tok, hf_model, tiny_world):
    from transformers import AutoModelForCausalLM

    run_id, actor, transport = actor_run
    buf = _buffer(redis_url, run_id)
    before = ray.get(actor.weights_checksum.remote())
    updated = AutoModelForCausalLM.from_pretrained(tiny_world.model_dir).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(0.05 * torch.randn_like(p))
    buf.publish_version(1, transport.publish(updated.named_parameters(), version=1))
    buf.put_prompts(arith_prompts(tok, f"{run_id}-v1", [(12, 7), (30, 4)], min_version=1))
    groups = collect_groups(buf, 2)
    assert ray.get(actor.weights_checksum.remote()) != pytest.approx(before)
    assert ray.get(actor.status.remote())["version"] == 1
    for g in groups:
        assert all(r.version_start == 1 and r.version_end == 1 for r in g.responses)
        _assert_logprobs_match(updated, g)          # generated by the new weights ...
        with pytest.raises(AssertionError):
            _assert_logprobs_match(hf_model, g)     # ... and not by the old ones


def test_tied_lm_head_follows_the_new_embedding(actor_run, redis_url, tok, hf_model, tiny_world):
    """Only the (tied) embedding changes: the engine's output layer must use the new one too. vLLM's
    reload says 'ParallelLMHead: Failed to load weights' here (nothing named lm_head is sent); the
    log-probs prove the head reads the reloaded embedding (actors/engine_logs.py drops that warning)."""
    from transformers import AutoModelForCausalLM

    run_id, actor, transport = actor_run
    buf = _buffer(redis_url, run_id)
    current, _ = buf.get_version()
    updated = AutoModelForCausalLM.from_pretrained(tiny_world.model_dir).eval()
    assert updated.config.tie_word_embeddings and updated.lm_head.weight is updated.model.embed_tokens.weight
    torch.manual_seed(1)
    with torch.no_grad():
        updated.model.embed_tokens.weight.mul_(1.5).add_(0.02 * torch.randn_like(updated.model.embed_tokens.weight))
    sent = dict(updated.named_parameters())
    assert "lm_head.weight" not in sent                       # tied: the head is not sent on its own
    buf.publish_version(current + 1, transport.publish(sent.items(), version=current + 1))
    buf.put_prompts(arith_prompts(tok, f"{run_id}-tied", [(8, 9), (40, 2)], step=current + 1, min_version=current + 1))
    for g in collect_groups(buf, 2):
        assert all(r.version_start == current + 1 for r in g.responses)
        _assert_logprobs_match(updated, g)                    # input embedding and output head both new
        with pytest.raises(AssertionError):
            _assert_logprobs_match(hf_model, g)


def test_a_repeated_long_prompt_gets_no_kv_of_the_old_weights(actor_run, redis_url, tok, tiny_world):
    """vLLM keeps a prompt's full KV blocks (128 tokens on CPU) for the next request with the same
    tokens. After a weight update the same 167-token prompt must be computed by the new weights: KV
    of its first block from the old ones would move every log-prob of the response."""
    from transformers import AutoModelForCausalLM

    run_id, actor, transport = actor_run
    buf = _buffer(redis_url, run_id)
    current, _ = buf.get_version()
    text = "Q: " + " ".join(f"{a}+{a + 1}" for a in range(30)) + "\nA: "
    ids = np.array(tok(text)["input_ids"], dtype=np.int32)
    assert len(ids) > 128

    def ask(tag: str, version: int):
        buf.put_prompts([PromptMsg(prompt_id=f"{run_id}-{tag}", data_source="tiny_arith", prompt_ids=ids,
                                   answer="1", n_samples=4, max_tokens=8, step=version, min_version=version)])
        [group] = collect_groups(buf, 1)
        assert all(r.version_start == version for r in group.responses)
        return group

    ask("long-old", current)                                     # its prompt blocks are cached now
    updated = AutoModelForCausalLM.from_pretrained(tiny_world.model_dir).eval()
    torch.manual_seed(2)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(0.05 * torch.randn_like(p))
    buf.publish_version(current + 1, transport.publish(updated.named_parameters(), version=current + 1))
    _assert_logprobs_match(updated, ask("long-new", current + 1))


def test_on_policy_admission_waits_for_the_version(actor_run, redis_url, tok, hf_model):
    """Prompts issued ahead of their version are held until it is published; held prompts filling the
    actor's whole room do not block a prompt it can serve now (a replacement queued behind them)."""
    run_id, actor, transport = actor_run
    buf = _buffer(redis_url, run_id)
    current, _ = buf.get_version()
    ahead = [(1, k) for k in range(_cfg().max_prompts_in_flight)]
    buf.put_prompts(arith_prompts(tok, f"{run_id}-gate", ahead, step=current + 1, min_version=current + 1))
    buf.put_prompts(arith_prompts(tok, f"{run_id}-now", [(2, 3)], step=current, min_version=current))
    [now] = collect_groups(buf, 1, timeout=60.0)
    assert now.group_id == f"{run_id}-now-0" and all(r.version_start == current for r in now.responses)
    assert collect_groups(buf, 1, timeout=3.0) == []          # held: the required weights do not exist yet
    location = transport.publish(hf_model.named_parameters(), version=current + 1)
    buf.publish_version(current + 1, location)
    gated = collect_groups(buf, len(ahead))
    assert len(gated) == len(ahead) and all(r.version_start == current + 1 for g in gated for r in g.responses)


def test_killed_actor_loses_and_duplicates_no_prompt(ray_local, redis_url, tiny_world, tok):
    run_id = f"kill-{uuid.uuid4().hex[:6]}"
    cfg = _cfg(num_actors=2, max_prompts_in_flight=4, max_restarts=0)
    actors = create_generation_actors(cfg, run_id, redis_url, str(tiny_world.model_dir), group_size=4)
    buf = _buffer(redis_url, run_id)
    problems = [(a, b) for a in range(4) for b in range(5)]        # 20 prompts
    loops = start_loops(actors)
    try:
        buf.put_prompts(arith_prompts(tok, run_id, problems, n=8, max_tokens=64))
        time.sleep(2.0)
        ray.kill(actors[0], no_restart=True)                       # SIGKILL-equivalent mid-run
        groups = collect_groups(buf, len(problems), timeout=180)
        ids = [g.group_id for g in groups]
        assert sorted(set(ids)) == sorted(p.prompt_id for p in arith_prompts(tok, run_id, problems))
        assert len(ids) == len(set(ids))                           # no duplicates delivered
        extra = buf.take_groups("test-learner", count=10, block_ms=RECLAIM_MS + 1000)
        assert extra == []
        fan_out(actors[1:], "stop")
        ray.get(loops[1], timeout=60)
    finally:                  # a failure must not leave the survivor generating into later tests
        for a in actors:
            ray.kill(a, no_restart=True)


POISON = "poison"


class WholeCallFailingPool(RewardPool):
    """The reward pool, except that a call holding a group whose answer is ``POISON`` fails as a whole, as
    when its worker died past its retries. Module level, so Ray pickles it by reference."""

    def score_many(self, requests):
        if any(r.answer == POISON for r in requests):
            raise RuntimeError("reward worker died mid-call")
        return super().score_many(requests)


def test_a_call_that_fails_as_a_whole_loses_only_the_group_that_fails_alone(ray_local, redis_url, tiny_world, tok):
    # one reward worker: the groups an engine step finishes share one call. One token each: the four
    # prompts, taken together, finish in the same engine step. Their call fails; each group is scored again
    # alone, so the three healthy ones are stored and only the poisoned one is dead-lettered
    run_id = f"call-{uuid.uuid4().hex[:6]}"
    prompts = arith_prompts(tok, run_id, [(1, 2), (2, 3), (3, 4), (4, 5)], n=2, max_tokens=1)
    prompts[2] = dataclasses.replace(prompts[2], answer=POISON)
    groups, letters = _run_actor_with(WholeCallFailingPool(num_workers=1), run_id, redis_url, tiny_world, tok,
                                      prompts, want_groups=3)
    assert sorted(g.group_id for g in groups) == [p.prompt_id for i, p in enumerate(prompts) if i != 2]
    assert all(r.reward_info["reason"] for g in groups for r in g.responses)       # scored
    assert [(d["reason"], prompts[2].prompt_id in d["detail"]) for d in letters] == [("reward_error", True)], letters
    assert "reward worker died mid-call" in letters[0]["detail"]


def _fail_next_put() -> None:
    """This process's next RunBuffer.put_groups raises, as a Redis connection lost at that moment would."""
    real = RunBuffer.put_groups

    def failing(self, items):
        RunBuffer.put_groups = real
        raise ConnectionError("injected: connection to Redis lost")

    RunBuffer.put_groups = failing


class FlakyStorePool(RewardPool):
    """Scores for real, except that a group whose answer is POISON comes back as SandboxUnavailable, and the first
    call holding one makes the next put_groups raise. score_many runs in the actor's process: the put it breaks
    is the actor's own."""

    injected = False

    def score_many(self, requests):
        results = super().score_many(requests)
        if any(r.answer == POISON for r in requests) and not FlakyStorePool.injected:
            FlakyStorePool.injected = True
            _fail_next_put()
        return [SandboxUnavailable("sandbox setup failed: injected") if r.answer == POISON else out
                for r, out in zip(requests, results)]


def _run_actor_with(pool, run_id, redis_url, tiny_world, tok, prompts, want_groups, timeout=120):
    """Start an actor scoring through ``pool`` on ``prompts`` (taken together: their group_size-2, one-token
    groups finish in one engine step), -> (the groups collected, the dead letters after they came)."""
    buf = _buffer(redis_url, run_id)
    buf.put_prompts(prompts)
    [actor] = create_generation_actors(_cfg(), run_id, redis_url, str(tiny_world.model_dir), group_size=2,
                                       reward_scorer=pool)
    loop = start_loops([actor])
    try:
        groups = collect_groups(buf, want_groups, timeout=timeout)
        deadline = time.monotonic() + 30
        while not buf.dead_letters(10) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)                         # a second dead letter would come within a flush or two
        assert buf.take_groups("test-learner", count=10, block_ms=500) == []          # nothing twice
        return groups, buf.dead_letters(10)
    finally:
        fan_out([actor], "stop")
        ray.get(loop, timeout=60)
        ray.kill(actor)
        for worker in pool.workers:
            ray.kill(worker)


def test_a_failed_store_after_a_failed_reward_dead_letters_once_and_stores_the_rest_once(ray_local, redis_url,
                                                                                         tiny_world, tok):
    # the engine step's four groups share one call (one worker); the poisoned one's sandbox was unavailable, so
    # it is dead-lettered, then the store of the other three fails. The book was settled first: the failed
    # group is not dead-lettered again, and the three are stored at the next flush, once
    run_id = f"put-{uuid.uuid4().hex[:6]}"
    prompts = arith_prompts(tok, run_id, [(1, 2), (2, 3), (3, 4), (4, 5)], n=2, max_tokens=1)
    prompts[1] = dataclasses.replace(prompts[1], answer=POISON)
    groups, letters = _run_actor_with(FlakyStorePool(num_workers=1), run_id, redis_url, tiny_world, tok, prompts, 3)
    assert sorted(g.group_id for g in groups) == [p.prompt_id for i, p in enumerate(prompts) if i != 1]
    assert [(d["reason"], prompts[1].prompt_id in d["detail"]) for d in letters] == [("sandbox_unavailable", True)], \
        letters
    assert "sandbox setup failed: injected" in letters[0]["detail"]


def test_a_reward_call_past_its_limit_dead_letters_only_its_hung_group_and_the_actor_goes_on(ray_local, redis_url,
                                                                                             tiny_world, tok):
    # the four groups' call hangs on one of them: past its limit (4 x 1 s + 2 s) the worker is killed and
    # restarted, each group is scored again alone, the three healthy ones are stored and the hung one, past
    # its limit again, is dead-lettered as reward_timeout. Before, the actor's scoring thread waited forever
    run_id = f"hang-{uuid.uuid4().hex[:6]}"
    prompts = arith_prompts(tok, run_id, [(1, 2), (2, 3), (3, 4), (4, 5)], n=2, max_tokens=1)
    prompts[3] = dataclasses.replace(prompts[3], answer=HANG)
    pool = StallingPool(num_workers=1, cfg=FAST_LIMITS)
    groups, letters = _run_actor_with(pool, run_id, redis_url, tiny_world, tok, prompts, 3, timeout=90)
    assert sorted(g.group_id for g in groups) == [p.prompt_id for p in prompts[:3]]
    assert [(d["reason"], prompts[3].prompt_id in d["detail"]) for d in letters] == [("reward_timeout", True)], \
        letters
