"""The learner's side of the collective transport's tests: rank 0 publishing versions of known weights
(:class:`Rank0`) to member processes (``bench.stub_members.member_main``: lagrl's real weight-transfer
engine into a recording model, no vLLM), and the weights and checksums every version has.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import torch

from bench.stub_members import member_main


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
