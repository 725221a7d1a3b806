"""The collective weight transport (gloo) into real vLLM engines: two GenerationActors on Ray, this
process as learner rank 0 (the hub and the sends, as ``learner.weight_sync`` drives them).

One module-scoped pair of actors serves every test (engine start-up dominates the cost):
- a version reaches both engines exactly: behaviour log-probs equal transformers' under the sent
  weights, and differ from the old ones;
- requests in flight while weights load record the straddle (version_end > version_start);
- an actor SIGKILLed while idle: the next send names it and goes on with the survivor; Ray
  restarts it, it registers again and the learner's catch-up brings it to the current version.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import numpy as np
import pytest
import ray
import torch

from actors.config import ActorConfig
from actors.transport.config import CollectiveConfig
from actors.factory import actor_name, create_generation_actors, fan_out, start_loops
from actors.transport import make_transport
from buffer import RunBuffer
from buffer.config import BufferConfig
from tests.integration.actor_io import arith_prompts, collect_groups

pytestmark = pytest.mark.integration

COLLECTIVE = CollectiveConfig(backend="gloo", bucket_mb=1, join_timeout_s=30.0, collective_timeout_s=30.0,
                              heartbeat_s=0.5, stale_after_s=4.0)


def noisy_model(model_dir, seed: int):
    """The tiny model plus 0.05 * N(0, 1) noise seeded by ``seed`` (a 'version' of the policy)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


class Rank0:
    """This process as learner rank 0."""

    def __init__(self, run_id: str, buf: RunBuffer):
        self.transport = make_transport("collective", run_id, cfg=COLLECTIVE)
        self.actor_transport = self.transport.bind_learner(0, "127.0.0.1", "cpu")
        self.buf = buf

    def publish(self, model, version: int, catch_up: bool = False) -> list[dict]:
        if not catch_up:
            self.buf.publish_version(version, self.transport.publish(model.named_parameters(), version))
        outcomes = [self.transport.after_announce(model.named_parameters(), catch_up=catch_up)]
        while outcomes[-1]["retry"]:
            outcomes.append(self.transport.after_announce(model.named_parameters()))
        return outcomes

    def wait(self, condition, what: str, timeout_s: float = 300.0):
        deadline = time.monotonic() + timeout_s
        while not (value := condition()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.transport.learner_status()}"
            time.sleep(0.2)
        return value


@pytest.fixture(scope="module")
def pair(ray_local, redis_url, tiny_world):
    run_id = f"coll-{uuid.uuid4().hex[:6]}"
    buf = RunBuffer.from_url(redis_url, run_id, BufferConfig(reclaim_idle_ms=60_000))
    rank0 = Rank0(run_id, buf)
    cfg = ActorConfig(num_actors=2, max_model_len=128, max_prompts_in_flight=8, heartbeat_s=0.5, idle_poll_ms=100,
                      num_cpus=1, weight_transport="collective", collective=COLLECTIVE, max_restarts=1)
    actors = create_generation_actors(cfg, run_id, redis_url, str(tiny_world.model_dir), group_size=4,
                                      transport=rank0.actor_transport)
    loops = start_loops(actors)
    names = [actor_name(run_id, i) for i in range(2)]
    rank0.wait(lambda: set(names) <= set(rank0.transport.learner_status()["live"]), "both actors to register")
    yield run_id, buf, rank0, actors, names
    fan_out(actors, "stop", timeout=60)
    ray.get(loops, timeout=120)
    for a in actors:
        ray.kill(a)


def _collect(buf: RunBuffer, want: int) -> list:
    got = collect_groups(buf, want, timeout=180.0)
    assert len(got) == want, f"{len(got)}/{want} groups"
    return got


def _max_logprob_error(model, group) -> float:
    """Largest |behaviour log-prob - transformers' log-prob| over a group's tokens."""
    worst = 0.0
    for r in group.responses:
        ids = torch.tensor(np.concatenate([group.prompt_ids, r.token_ids]))[None].long()
        with torch.no_grad():
            logits = model(ids).logits[0, len(group.prompt_ids) - 1:-1]                 # (L, V)
        ref = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(group.prompt_ids):, None])[:, 0]
        worst = max(worst, float(np.abs(r.logprobs - ref.numpy()).max()))
    return worst


def _status(actors) -> list[dict]:
    return ray.get([a.status.remote() for a in actors])


def test_a_version_reaches_both_engines_exactly(pair, tok, tiny_world):
    from transformers import AutoModelForCausalLM

    run_id, buf, rank0, actors, names = pair
    original = AutoModelForCausalLM.from_pretrained(tiny_world.model_dir).eval()
    v1 = noisy_model(tiny_world.model_dir, 1)
    [out] = rank0.publish(v1, 1)
    assert out["errors"] == 0 and out["members"] == 2
    assert out["events"] == [
        f"version 1: group 1 formed with {names[0]} (rank 1), {names[1]} (rank 2) (gloo, 2 buckets)"]
    rank0.wait(lambda: [s["version"] for s in _status(actors)] == [1, 1], "both actors at version 1")
    buf.put_prompts(arith_prompts(tok, f"{run_id}-v1", [(i, 7) for i in range(6)], step=1, min_version=1))
    for g in _collect(buf, 6):
        assert all(r.version_start == r.version_end == 1 for r in g.responses)
        assert _max_logprob_error(v1, g) < 2e-3                  # sampled with exactly the sent weights
        assert _max_logprob_error(original, g) > 0.05            # and not with the old ones
    assert len(set(ray.get([a.weights_checksum.remote() for a in actors]))) == 1


def test_requests_in_flight_record_the_straddle(pair, tok, tiny_world):
    """Weights load between engine steps while long requests run: those responses finish with
    version_end = the new version > version_start (DESIGN.md §8)."""
    run_id, buf, rank0, actors, names = pair
    current, _ = buf.get_version()
    buf.put_prompts(arith_prompts(tok, f"{run_id}-long", [(i, 3) for i in range(8)], step=current,
                                  min_version=current, n=8, max_tokens=100))
    rank0.wait(lambda: sum(s["in_flight"] for s in _status(actors)) >= 4, "requests in flight", timeout_s=60)
    rank0.publish(noisy_model(tiny_world.model_dir, current + 1), current + 1)
    groups = _collect(buf, 8)
    spans = [(r.version_start, r.version_end) for g in groups for r in g.responses]
    assert all(s == current and e in (current, current + 1) for s, e in spans), spans
    assert (current, current + 1) in spans, f"no response straddled the update: {spans}"


def test_killed_actor_is_named_then_restarted_and_caught_up(pair, tok, tiny_world):
    run_id, buf, rank0, actors, names = pair
    current, _ = buf.get_version()
    pid = _status(actors)[0]["pid"]
    os.kill(pid, signal.SIGKILL)
    v = current + 1
    model = noisy_model(tiny_world.model_dir, v)
    t0 = time.monotonic()
    outcomes = rank0.publish(model, v)
    # the first attempt ends once the dead actor's heartbeat is stale, naming it; the retry goes on without it
    assert time.monotonic() - t0 < COLLECTIVE.join_timeout_s
    assert outcomes[0]["errors"] == 1 and f"missing {names[0]} (rank 1, last heartbeat" in outcomes[0]["events"][-1]
    assert outcomes[-1]["errors"] == 0 and len(outcomes[-1]["events"]) == 1
    assert outcomes[-1]["events"][0].endswith(f"formed with {names[1]} (rank 1) (gloo, 2 buckets; {names[0]} left)")
    # Ray restarts actor 0 (new process, new engine); it registers as a new incarnation lacking v
    rank0.wait(lambda: rank0.transport.learner_status()["pending"], "the restarted actor to register", timeout_s=400)
    [catch] = rank0.publish(model, v, catch_up=True)
    assert catch["errors"] == 0
    assert catch["events"][0].endswith(f"formed with {names[0]} (rank 1) (gloo, 2 buckets; {names[0]} restarted) "
                                       "[catch-up]")
    rank0.wait(lambda: [s["version"] for s in _status(actors)] == [v, v], f"both actors at version {v}")
    assert _status(actors)[0]["pid"] != pid
    assert len(set(ray.get([a.weights_checksum.remote() for a in actors]))) == 1
    buf.put_prompts(arith_prompts(tok, f"{run_id}-after", [(i, 2) for i in range(6)], step=v, min_version=v))
    assert all(_max_logprob_error(model, g) < 2e-3 for g in _collect(buf, 6))
