"""Dynamic-sampling top-ups follow the learner's published need (real redis-server, tiny tokenizer)."""

from __future__ import annotations

import time

import pytest

from buffer import RunBuffer
from buffer.versions import StepClock
from launch.run.data import PromptRenderer
from launch.run.feeder import PromptFeeder
from rewards.problems import Problem
from bench.synthetic import make_group

pytestmark = pytest.mark.integration
D_R = 8


@pytest.fixture
def buf(redis_server, run_id):
    buffer = RunBuffer.from_url(redis_server.url, run_id)
    yield buffer
    buffer.close()


def _feeder(buf, tiny_world, hint_wait_s: float, issue_ahead: int = 1, over_issue_waste: float = 0.0) -> PromptFeeder:
    from transformers import AutoTokenizer

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(str(tiny_world.model_dir)), chat_template=False,
                              template="Q: {problem}\nA: ")
    problems = [Problem(id=f"p{i}", data_source="tiny_arith", problem=f"{i}+1", answer=str(i + 1))
                for i in range(50)]
    buf.set_meta(learner_clock=StepClock().to_dict())      # strict on-policy: one update per step, lag 0
    return PromptFeeder(buf, problems, renderer, rollout_batch=D_R, group_size=2, temperature=1.0,
                        max_model_len=256, stage_at=lambda step: (0, 16), hint_wait_s=hint_wait_s,
                        issue_ahead=issue_ahead, over_issue_waste=over_issue_waste)


def _answer_all(buf: RunBuffer) -> int:
    """Play the actor: turn every new prompt the published version serves into a stored group (which
    ACKs the prompt); prompts issued ahead of their version stay taken and pending (held)."""
    version = buf.get_version()[0]
    answered = 0
    for entry_id, prompt in buf.take_prompts("actor-0", count=100, block_ms=0):
        if prompt.min_version <= version:
            buf.put_group(make_group(prompt.prompt_id, n=prompt.n_samples), entry_id)
            answered += 1
    return answered


def _need(buf: RunBuffer, groups: int, step: int = 0, at: float | None = None, lost: int = 0,
          collected: dict | None = None) -> None:
    """Publish what ``learner.admission`` does; a step's last need (``groups`` 0) records it as collected."""
    if collected is None and groups == 0:
        collected = {"step": step, "lost": lost}
    buf.announce_meta(learner_need={"step": step, "groups": groups, "lost": lost,
                                    "time": time.time() if at is None else at, "collected": collected})


def test_each_lost_group_is_replaced_at_once_by_one_prompt(buf, tiny_world):
    """Strict on-policy: D_R prompts, then one more per group the learner reports lost (zero advantage),
    while the rest of the batch is still out: the step never holds more prompts than it can use."""
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=0)
    feeder.tick()
    assert feeder.outstanding() == D_R and feeder.stats.per_step[0].issued == D_R
    _need(buf, 8, lost=2)               # two zero-advantage groups read, six prompts still generating
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + 2
    feeder.tick()                       # the same report again: nothing more
    _need(buf, 5, lost=2)
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + 2
    _need(buf, 3, lost=3)               # one more lost
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + 3
    assert _answer_all(buf) == D_R + 3
    _need(buf, 0, lost=3)               # the learner has its D_R valid groups: no top-up
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + 3 and feeder.outstanding() == 0


def test_a_step_after_rejections_gets_extra_prompts_and_replaces_only_losses_beyond_them(buf, tiny_world):
    """Step 0 lost 4 of 12 groups read (rate 1/3): step 1 gets D_R + 1 prompts (launch.run.over_issue:
    e = 2 would leave an expected 0.121 groups over, more than 1% of 10), and its first loss is
    covered by the extra prompt, its second replaced."""
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=0, over_issue_waste=0.01)
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R                   # no rate measured yet: no extras
    _need(buf, 0, lost=4)                                           # step 0 collected: 8 used, 4 lost
    buf.publish_version(1, "test://weights/1")
    buf.set_meta(learner_clock=StepClock(step=1, version=1).to_dict())
    feeder.tick()
    assert feeder.stats.per_step[1].issued == D_R + 1 and feeder.stats.over_issued == 1
    _need(buf, 8, step=1, lost=1)
    feeder.tick()
    assert feeder.stats.per_step[1].issued == D_R + 1              # the extra prompt covers it
    _need(buf, 7, step=1, lost=2)
    feeder.tick()
    assert feeder.stats.per_step[1].issued == D_R + 2              # one replacement for the loss beyond it


def test_losses_reported_ahead_for_the_next_step_are_replaced_at_once(buf, tiny_world):
    """Off-policy (max_lag 1), while step 0 trains the learner already reads step 1's batch: the two
    groups it reports lost get their replacements for step 1 now, step 0 gets nothing more, and step
    0's final count (in ``collected``, its own ``groups: 0`` need overwritten) still sets the rate."""
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=0)
    buf.set_meta(learner_clock=StepClock(max_lag=1).to_dict())
    feeder.tick()
    assert {s: st.issued for s, st in feeder.stats.per_step.items()} == {0: D_R, 1: D_R}
    _need(buf, 3, step=1, lost=2, collected={"step": 0, "lost": 4})
    feeder.tick()
    assert {s: st.issued for s, st in feeder.stats.per_step.items()} == {0: D_R, 1: D_R + 2}
    assert feeder.reject_rate.steps == {0: (D_R + 4, 4)}
    feeder.tick()                                       # the same report again: nothing more
    assert feeder.stats.per_step[1].issued == D_R + 2
    taken = buf.take_prompts("actor-0", count=100, block_ms=0)
    assert sorted(p.step for _, p in taken)[-2:] == [1, 1] and all(p.min_version == 0 for _, p in taken)


def test_an_unreported_shortfall_is_topped_up_by_the_need_after_a_fresh_hint(buf, tiny_world):
    """A prompt dead-lettered by an actor is no lost group: once everything answerable is answered and
    the learner still lacks groups (a hint newer than that moment), the feeder issues exactly the need."""
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0)
    feeder.tick()
    assert sorted(feeder.stats.per_step) == [0, 1]          # step 1 issued ahead: it waits for version 1
    before_answers = time.time()
    _need(buf, 8)                       # published while the first batch is still being generated
    assert _answer_all(buf) == D_R
    feeder.tick()                       # all answerable answered (step 1's wait), but that hint predates it
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R
    _need(buf, 3)                       # the learner read everything and still lacks 3 valid groups
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + 3
    feeder.tick()                       # the top-up is outstanding: nothing more
    assert feeder.stats.per_step[0].issued == D_R + 3
    assert _answer_all(buf) == 3
    _need(buf, 2, at=before_answers)    # an old hint is not trusted
    feeder.tick()
    _need(buf, 0)
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + 3 and feeder.outstanding() == D_R   # step 1's, held


def test_without_a_hint_for_the_step_it_falls_back_to_half_a_batch(buf, tiny_world):
    feeder = _feeder(buf, tiny_world, hint_wait_s=0.3)
    feeder.tick()
    _answer_all(buf)
    _need(buf, 5, step=7)               # a hint about another step does not count
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R
    time.sleep(0.4)
    feeder.tick()
    assert feeder.stats.per_step[0].issued == D_R + D_R // 2


def test_prompts_follow_the_clock_the_learner_publishes(buf, tiny_world):
    """Off-policy (4 updates a step, lag 4) issues a step ahead; after the guard switches the run to
    strict on-policy at step 1 (version 4), step s waits for exactly its start version."""
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=0)
    buf.set_meta(learner_clock=StepClock(updates_per_step=4, max_lag=4).to_dict())
    feeder.tick()
    assert sorted(feeder.stats.per_step) == [0, 1]                      # step 1 may start at version 0
    buf.publish_version(4, "test://weights/4")
    buf.set_meta(learner_clock=StepClock(step=1, version=4, updates_per_step=1, max_lag=0).to_dict())
    feeder.tick()
    assert sorted(feeder.stats.per_step) == [0, 1]                      # step 2 needs version 5
    buf.publish_version(5, "test://weights/5")
    feeder.tick()
    assert sorted(feeder.stats.per_step) == [0, 1, 2]
    taken = buf.take_prompts("actor-0", count=100, block_ms=0)
    assert {(p.step, p.min_version) for _, p in taken} == {(0, 0), (1, 0), (2, 5)}


def test_unpinned_steps_are_issued_ahead_and_pinned_ones_only_when_their_version_exists(buf, tiny_world):
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=1)
    feeder.tick()
    taken = buf.take_prompts("actor-0", count=100, block_ms=0)
    assert {(p.step, p.min_version) for _, p in taken} == {(0, 0), (1, 1)}   # step 1 held until version 1
    buf.publish_version(1, "test://weights/1")
    feeder.tick()
    assert sorted(feeder.stats.per_step) == [0, 1, 2]
    pinned = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=1)
    buf.set_meta(learner_clock=StepClock(step=1, version=1, max_lag=1, fixed_lag=1).to_dict())
    pinned.tick()                                   # steps 1 and 2 (pins 0 and 1): nothing ahead of a pin
    assert sorted(pinned.stats.per_step) == [1, 2]


def test_prompts_stamped_by_an_older_clock_do_not_hold_back_a_top_up(buf, tiny_world):
    """The guard's switch to on-policy can leave a step's prompts, issued ahead by the off-policy clock,
    needing a version the step never reaches. A later top-up of that step (stamped by the new clock)
    must not make the feeder count them as answerable: that hung a guarded run (nothing issued, the
    learner waiting for one group, the actor holding prompts it could not start)."""
    feeder = _feeder(buf, tiny_world, hint_wait_s=60.0, issue_ahead=1)
    buf.set_meta(learner_clock=StepClock(updates_per_step=4, max_lag=4).to_dict())
    feeder.tick()
    for v in range(1, 5):                # step 0's four updates: at version 4 step 3 is issued ahead
        buf.publish_version(v, f"test://weights/{v}")
        feeder.tick()
    assert feeder.stats.per_step[3].issued == D_R                       # needing 12 - 4 = 8 (off-policy)
    buf.set_meta(learner_clock=StepClock(step=1, version=4, updates_per_step=1, max_lag=0).to_dict())
    for v in (5, 6):                     # on-policy steps 1 and 2: step 3 starts at version 6, not 12
        buf.publish_version(v, f"test://weights/{v}")
        feeder.tick()
    _answer_all(buf)
    feeder.tick()                        # everything answerable is answered (from now on a need is fresh)
    _need(buf, D_R, step=3)
    feeder.tick()                        # nothing step 3 holds can start before version 8: a batch now
    assert feeder.stats.per_step[3].issued == 2 * D_R
    assert _answer_all(buf) == D_R
    feeder.tick()
    _need(buf, 1, step=3)                # one group short, nothing answerable left: one more
    feeder.tick()
    assert feeder.stats.per_step[3].issued == 2 * D_R + 1
    taken = buf.take_prompts("actor-0", count=100, block_ms=0)
    assert [(p.step, p.min_version) for _, p in taken] == [(3, 6)]
