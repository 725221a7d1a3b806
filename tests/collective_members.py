"""Stand-ins for generation actors in tests of the collective transport without vLLM.

A member process attaches a bound ``CollectiveTransport`` to a :class:`StubLLM` and polls like a
GenerationActor's loop. ``StubLLM`` drives lagrl's real vLLM weight-transfer engine
(``LagrlCollectiveEngine``: init, header check, bucket receive, unpack) with vLLM's layerwise
reload replaced by a model that records what it is given, so the protocol, the channels and the
engine's receive path are exercised exactly, only the model is fake. Members report through the
hub (``test/<actor>/...``), which the test reads.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
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


def weights(version: int, device: str = "cpu") -> list[tuple[str, torch.Tensor]]:
    """~4.2 MB in 9 tensors (5 buckets of <= 1 MB), different for every version."""
    g = torch.Generator().manual_seed(version)
    shapes = {"embed": (256, 512), "q": (128, 128), "k": (128, 128), "norm": (512,), "mlp": (512, 512),
              "mlp2": (512, 512), "mlp3": (512, 512), "out": (256, 512), "head_bias": (300,)}
    return [(n, torch.randn(s, generator=g).to(device)) for n, s in shapes.items()]


def checksums(version: int) -> dict[str, float]:
    return {n: float(t.double().sum()) for n, t in sorted(weights(version))}


class Rank0:
    """This process as rank 0 of a 1-rank learner (publish + after_announce, as ``learner.weight_sync``
    drives them) and the spawned member processes; ``device`` is the learner's, members get theirs."""

    def __init__(self, cfg, device: str = "cpu"):
        from actors.transport import make_transport

        self.device = device
        self.transport = make_transport("collective", "proto", cfg=cfg)
        self.actor_transport = self.transport.bind_learner(0, "127.0.0.1", "cuda" if device.startswith("cuda") else "cpu")
        self.hub = self.transport._sender.hub
        self.ctx = mp.get_context("spawn")
        self.procs: dict[str, mp.Process] = {}

    def spawn(self, actor: str, die_at=None, fail: bool = False, device: str = "cpu") -> None:
        p = self.ctx.Process(target=member_main, args=(self.actor_transport, actor, die_at, fail, True, device),
                             daemon=True)
        p.start()
        self.procs[actor] = p

    def wait_live(self, actors: list[str], timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while set(actors) - set(self.transport.learner_status()["live"]):
            assert time.monotonic() < deadline, f"{actors} never registered: {self.transport.learner_status()}"
            time.sleep(0.1)

    def publish(self, version: int, catch_up: bool = False) -> list[dict]:
        """All attempts of one version (or one catch-up); returns their outcomes."""
        params = weights(version, self.device)
        if not catch_up:
            assert self.transport.publish(params, version).endswith(f"/{version}")
        outcomes = [self.transport.after_announce(params, catch_up=catch_up)]
        while outcomes[-1]["retry"]:
            outcomes.append(self.transport.after_announce(params))
        return outcomes

    def received(self, actor: str, version: int, timeout_s: float = 10.0) -> dict:
        key = f"test/{actor}/v{version}"
        assert self.hub.wait_keys([key], timeout_s) == [], f"{actor} never reported version {version}"
        return self.hub.get_json(key)

    def kill(self, actor: str) -> None:
        os.kill(self.procs[actor].pid, signal.SIGKILL)
        self.procs[actor].join(10)

    def close(self) -> None:
        self.hub.store.set("test/stop", "1")
        for p in self.procs.values():
            p.join(10)
            if p.is_alive():
                p.kill()
