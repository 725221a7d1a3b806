"""ScoringBook, the generation actor's groups between scoring and the buffer: each leaves it exactly once,
whatever the Redis writes do (the real actor: tests/integration/test_actors.py)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from actors import scoring_book
from actors.scoring_book import Scoring, ScoringBook
from rewards.result import RewardResult, RewardTimeout, SandboxUnavailable
from bench.synthetic import make_group


class FakeBuffer:
    """put_groups / reject_prompt as the actor calls them; ``fail_puts`` / ``fail_rejects``: how many raise."""

    def __init__(self, fail_puts: int = 0, fail_rejects: int = 0):
        self.stored, self.rejected, self.put_calls = [], [], 0
        self.fail_puts, self.fail_rejects = fail_puts, fail_rejects

    def put_groups(self, items):
        self.put_calls += 1
        if self.fail_puts:
            self.fail_puts -= 1
            raise ConnectionError("redis went away")
        self.stored += [group.group_id for group, _ in items]
        return ["1-0"] * len(items)

    def reject_prompt(self, entry_id, source, reason, detail="", raw=None):
        if self.fail_rejects:
            self.fail_rejects -= 1
            raise ConnectionError("redis went away")
        self.rejected.append((entry_id, reason))


def _scorer(bad: dict[str, Exception], whole_call_fails: bool = False):
    """A submit function: results for each group, ``bad``'s exception in place of a group named there; a call
    of several groups fails as a whole when ``whole_call_fails``. Records the calls."""
    calls = []

    def submit(groups):
        calls.append([g.group_id for g in groups])
        future = Future()
        if whole_call_fails and len(groups) > 1:
            future.set_exception(RewardTimeout("call past its limit"))
        else:
            future.set_result(([bad.get(g.group_id) or [RewardResult(1.0, "correct", "4")] * len(g.responses)
                                for g in groups], 0.0))
        return future

    return submit, calls


def _jobs(buffer, names):
    return [Scoring(buffer, f"{i}-0", make_group(name, n=2, tokens=3)) for i, name in enumerate(names)]


@pytest.fixture(autouse=True)
def no_retry_wait(monkeypatch):
    monkeypatch.setattr(scoring_book, "PUT_RETRY_S", 0.0)


def test_a_failed_store_after_a_dead_letter_dead_letters_once_and_stores_once():
    # the old bug: put_groups raised after the poisoned group was dead-lettered, both stayed in the list, and
    # the next flush dead-lettered its prompt a second time
    buf = FakeBuffer(fail_puts=1)
    submit, _ = _scorer({"poison": SandboxUnavailable("sandbox setup failed: no mount")})
    notes = []
    book = ScoringBook(submit, notes.append)
    book.add([_jobs(buf, ["a", "poison", "b"])])
    assert book.flush(block=False) == 0
    assert buf.rejected == [("1-0", "sandbox_unavailable")] and buf.stored == []
    assert [job.group.group_id for job in book] == ["a", "b"]      # kept, to be stored again (prompts stay touched)
    assert "ConnectionError" in notes[-1]
    assert book.flush(block=False) == 2
    assert buf.stored == ["a", "b"] and buf.rejected == [("1-0", "sandbox_unavailable")] and len(book) == 0
    assert book.flush(block=True) == 0 and buf.put_calls == 2


def test_a_store_that_keeps_failing_is_dropped_its_prompt_left_pending():
    buf = FakeBuffer(fail_puts=10)
    submit, _ = _scorer({})
    book = ScoringBook(submit, lambda note: None)
    book.add([_jobs(buf, ["a"])])
    assert book.flush(block=True) == 0                  # returns: PUT_ATTEMPTS tries, then dropped
    assert buf.put_calls == scoring_book.PUT_ATTEMPTS and len(book) == 0 and buf.rejected == []


def test_a_dead_letter_that_fails_is_not_retried():
    # reject_prompt is one transaction: a retry after a lost reply would dead-letter twice; not written, the prompt
    # stays pending and is reclaimed
    buf = FakeBuffer(fail_rejects=1)
    submit, _ = _scorer({"poison": RuntimeError("verifier crashed")})
    notes = []
    book = ScoringBook(submit, notes.append)
    book.add([_jobs(buf, ["poison", "a"])])
    assert book.flush(block=True) == 1
    assert buf.rejected == [] and buf.stored == ["a"] and len(book) == 0
    assert any("not written" in n for n in notes)


def test_a_call_that_fails_as_a_whole_is_scored_again_alone_once_then_dead_lettered_with_its_reason():
    buf = FakeBuffer()
    submit, calls = _scorer({"hung": RewardTimeout("past its limit")}, whole_call_fails=True)
    book = ScoringBook(submit, lambda note: None)
    book.add([_jobs(buf, ["a", "hung", "b"])])
    assert book.flush(block=True) == 2
    assert calls == [["a", "hung", "b"], ["a"], ["hung"], ["b"]]      # alone once, never again
    assert buf.stored == ["a", "b"] and buf.rejected == [("1-0", "reward_timeout")]


def test_rewards_land_in_the_group_and_unknown_failures_keep_the_generic_reason():
    buf = FakeBuffer()
    submit, _ = _scorer({"odd": ValueError("2 rewards for 3 responses")})
    book = ScoringBook(submit, lambda note: None)
    jobs = _jobs(buf, ["a", "odd"])
    book.add([jobs])
    assert book.flush(block=True) == 1
    assert [r.reward_info["reason"] for r in jobs[0].group.responses] == ["correct", "correct"]
    assert buf.rejected == [("1-0", "reward_error")]
