"""A generation actor's intake and held prompts without an engine (actors.intake, actors.requests): the
prompts refused at once, and how pins decide which weights load."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

import actors.intake as intake_module
from actors.bookkeeping import ActorStats
from actors.intake import Intake
from actors.requests import EngineStepFailed, Held, InFlight, Requests, target
from buffer.messages import PromptMsg


def prompt(i: int, *, min_version: int = 0, pin: int | None = None, length: int = 4, max_tokens: int = 8):
    return PromptMsg(prompt_id=f"p{i}", data_source="tiny_arith", prompt_ids=np.arange(length, dtype=np.int32),
                     answer="4", n_samples=2, max_tokens=max_tokens, step=0, min_version=min_version,
                     pin_version=pin)


class Buffer:
    def __init__(self, name: str, prompts: list[PromptMsg] = ()):
        self.keys = SimpleNamespace(prompts=f"{name}:prompts")
        self.client = None
        self.queue = [(f"{1000 + i}-0", p) for i, p in enumerate(prompts)]
        self.rejected: list[tuple[str, str, str]] = []

    def take_prompts(self, actor_id, count, block_ms):
        got, self.queue = self.queue[:count], self.queue[count:]
        return got

    def reject_prompt(self, entry_id, actor_id, reason, detail=""):
        self.rejected.append((entry_id, reason, detail))


class Watch:
    def __init__(self, client, keys, on_grow=None):
        self.keys = keys

    def grew(self, key):
        return True

    def stop(self):
        pass


class Weights:
    """EngineWeights' surface: the version, loads by number (``have`` versions exist), the newest via sync."""

    def __init__(self, version: int, have: set[int], newest: int):
        self.version, self.have, self.newest, self.loaded_at = version, have, newest, 0.0
        self.loads: list[int] = []

    def load(self, version):
        self.loads.append(version)
        if version in self.have:
            self.version = version
            return True
        return False

    def sync(self, force=False):
        self.version = max(self.version, self.newest)
        return self.version

    def kept(self):
        return sorted(self.have)


def requests(weights) -> Requests:
    return Requests("a-0", 1.0, engine=None, engine_lock=threading.RLock(), weights=weights, stats=ActorStats(),
                    stop=threading.Event())


@pytest.fixture
def watch(monkeypatch):
    monkeypatch.setattr(intake_module, "StreamWatch", Watch)


def test_intake_refuses_too_long_and_unservable_pins_and_holds_the_rest(watch):
    train = Buffer("t", [prompt(0), prompt(1, length=20), prompt(2, pin=1), prompt(3)])
    evaluation = Buffer("e", [prompt(9)])
    intake = Intake("a-0", 24, train, evaluation, lambda: None, serves_pins=False, transport_name="CollectiveTransport")
    held = intake.take(room=8)
    assert [h.prompt.prompt_id for h in held] == ["p9", "p0", "p3"]          # evaluation first
    assert [(e, r) for e, r, _ in train.rejected] == [("1001-0", "prompt_too_long"),
                                                      ("1002-0", "pinned_version_unsupported")]
    assert "--actors.weight_transport ray" in train.rejected[1][2] and "CollectiveTransport" in train.rejected[1][2]
    assert not intake.took_all and set(held[0].trace) == {"issued", "taken"}
    both = Intake("a-0", 24, Buffer("t", [prompt(0), prompt(1)]), Buffer("e"), lambda: None, serves_pins=True,
                  transport_name="RayObjectStoreTransport")
    assert len(both.take(room=1)) == 1 and both.took_all                      # more may wait: read again


def test_pins_choose_the_weights():
    r = requests(Weights(version=3, have={3, 4}, newest=4))
    pinned, newer = prompt(0, pin=3), prompt(1, min_version=4)
    assert r.servable(pinned) and not r.servable(newer) and (target(pinned), target(newer)) == (3, 4)
    r.in_flight["x"] = InFlight(None, "1-0", pinned, 3, 0.0)
    assert r.pinned_busy() and not r.may_load(4)                # a pinned request runs: its weights stay
    r.in_flight.clear()
    r.held.append(Held(None, "2-0", newer))
    assert not r.pinned_busy() and r.may_load(4)


def test_a_pin_older_than_every_kept_version_is_dead_lettered_as_stale():
    weights = Weights(version=4, have={3, 4}, newest=4)
    r = requests(weights)
    gone, train = prompt(0, pin=1), Buffer("t")
    r.held = [Held(train, "5-0", gone)]
    r.start_held()                                  # tries to load 1, cannot, and 1 is older than 3: stale
    assert weights.loads == [1] and r.held == [] and [x[1] for x in train.rejected] == ["stale"]
    r.held = [Held(train, "6-0", prompt(1, pin=5))]   # not there yet (a resumed learner republishes it): held
    r.start_held()
    assert weights.loads == [1, 5] and len(r.held) == 1 and len(train.rejected) == 1


def test_an_engine_step_that_raises_is_a_failed_engine():
    """vLLM's scheduler has moved on when its step raises (on CPU: a seeded request's generator rewind), so
    the step's requests never finish: the actor must exit for a new engine (actors.generation), not retry."""
    class Engine:
        def has_unfinished_requests(self):
            return True

        def step(self):
            raise RuntimeError("CPU Generator does not use offset")

    book = requests(Weights(0, {0}, 0))
    book.engine = Engine()
    with pytest.raises(EngineStepFailed, match="RuntimeError: CPU Generator does not use offset"):
        book.step()
