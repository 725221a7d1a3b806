"""Stand-ins for generation actors, for measuring and testing the collective transport without vLLM.

A member process attaches a bound ``CollectiveTransport`` to a :class:`StubLLM` and polls like a
GenerationActor's loop (:func:`member_main`). ``StubLLM`` drives lagrl's real vLLM weight-transfer engine
(``LagrlCollectiveEngine``: init, header check, bucket receive, unpack) with vLLM's layerwise reload
replaced by a model that records what it is given, so the protocol, the channels and the engine's receive
path are exercised exactly, only the model is fake. Members report through the hub (``test/<actor>/...``),
which the caller reads. Used by ``bench/weight_sync.py`` and the collective transport's tests
(``tests/collective_members.py``).
"""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import torch


class RecordingModel:
    """Receives ``load_weights`` calls; dies (SIGKILL) at bucket ``die_at[1]`` of version ``die_at[0]``
    (or, with ``die_at_init``, when its engine joins a group); with ``fail``, raises at the second
    bucket of every version (alive, but never loads). With
    ``keep=False`` it keeps only a checksum (benchmarks: memory stays one bucket)."""

    def __init__(self, die_at: tuple[int, int] | None = None, fail: bool = False, keep: bool = True):
        self.params: dict[str, torch.Tensor] = {}
        self.sums: dict[str, float] = {}
        self.version = None
        self.bucket = 0
        self.die_at, self.fail, self.keep = die_at, fail, keep
        self.die_at_init = False             # SIGKILL when joining the next group (after the learner's "go")

    def load_weights(self, named) -> set[str]:
        if self.die_at == (self.version, self.bucket):
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fail and self.bucket == 1:
            raise RuntimeError("injected loader failure")
        self.bucket += 1
        for name, t in named:
            if self.keep:
                self.params[name] = t.clone()
            else:
                self.sums[name] = float(t.reshape(-1)[:1].float().sum())   # touch it, keep nothing
        return {n for n, _ in named}

    def checksums(self) -> dict[str, float]:
        return {n: float(t.double().sum()) for n, t in sorted(self.params.items())} if self.keep else {}


def _engine_class():
    from actors.transport.vllm_engine import LagrlCollectiveEngine

    class StubEngine(LagrlCollectiveEngine):
        """The real engine with vLLM's layerwise reload replaced (there is no vLLM model here)."""

        def init_transfer_engine(self, init_info) -> None:
            if self.model.die_at_init:
                os.kill(os.getpid(), signal.SIGKILL)
            super().init_transfer_engine(init_info)

        def start_weight_update(self) -> None:
            self.model.bucket = 0

        def finish_weight_update(self) -> None:
            pass

        def receive_weights(self, info) -> None:
            self.model.version = info.version
            super().receive_weights(info)

    return StubEngine


class StubLLM:
    """The four ``vllm.LLM`` weight-transfer calls, on one in-process engine."""

    def __init__(self, die_at: tuple[int, int] | None = None, fail: bool = False, keep: bool = True,
                 device: str = "cpu"):
        parallel = SimpleNamespace(rank=0, world_size=1, data_parallel_index=0)
        vllm_config = SimpleNamespace(parallel_config=parallel, model_config=None)
        self.llm_engine = SimpleNamespace(vllm_config=vllm_config)
        self.model = RecordingModel(die_at, fail, keep)
        self.engine = _engine_class()(None, vllm_config, torch.device(device), self.model)

    def init_weight_transfer_engine(self, request: dict) -> None:
        self.engine.init_transfer_engine(self.engine.parse_init_info(request["init_info"]))

    def start_weight_update(self) -> None:
        self.engine.start_weight_update()

    def update_weights(self, request: dict) -> None:
        self.engine.update_weights(request["update_info"])

    def finish_weight_update(self) -> None:
        self.engine.finish_weight_update()


def member_main(transport, actor_id: str, die_at: tuple[int, int] | None = None, fail: bool = False,
                keep: bool = True, device: str = "cpu") -> None:
    """A GenerationActor's weight loop: poll between 'engine steps', report every load to the hub."""
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    llm = StubLLM(die_at, fail, keep, device)
    transport.attach(actor_id, llm)
    hub = transport._receiver.hub
    version, errors, reported = 0, 0, transport._receiver.stats
    while not hub.has("test/stop"):
        llm.model.fail = fail or hub.has(f"test/{actor_id}/fail")     # the test may break its loader
        llm.model.die_at_init = hub.has(f"test/{actor_id}/die_at_init")
        try:
            version = transport.poll(llm, version, (0, ""))
        except Exception as exc:
            errors += 1
            hub.set_json(f"test/{actor_id}/error/{errors}", {"error": str(exc), "consistent": transport.consistent})
            continue
        if transport._receiver.stats is not reported:          # a new load completed
            reported = transport._receiver.stats
            hub.set_json(f"test/{actor_id}/v{version}", llm.model.checksums())
        transport.wait_for_send(0.01)        # an idle GenerationActor's wait (``_wait_for_work``)
