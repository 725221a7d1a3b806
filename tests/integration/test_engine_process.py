"""The vLLM engine core in its own process on CPU (``--actors.engine_process separate``), as on every GPU.

The tiny strict on-policy run in this process (``launch.run.driver.run``), one actor, once per weight
transport: ``ray`` (the object store; the actor hands each version to its engine through a
shared-memory file) and ``collective`` (gloo, received inside the engine process). After every
learner step the test checks that the engine holds exactly the learner's weights:

- the float64 sum of every parameter the engine keeps materialised (embedding, norms, the fused
  qkv biases: vLLM's CPU kernels repack linear weights) equals the learner's over the same HF
  parameters (fused ones added up), and it moved since the last version;
- the step trained at lag 0 on tokens whose behaviour log-probs match the learner's recomputed ones
  to fp32 rounding (mismatch KL < 1e-9): every linear weight is right too.

And an engine process never outlives its actor: the ray run SIGKILLs the actor after its last step
(nothing in the actor runs then; Ray restarts it and the new engine loads the current version), and
each run's end stops and kills its actor; no engine process of either is left, and nothing they
made is left in /dev/shm (neither vLLM's message queues nor the object store's staging files),
except the message queues (and a semaphore) of the SIGKILLed actor's engine: Ray kills an actor's
process group when the actor dies, before vLLM's shutdown could remove them (the test removes them).
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
import ray

pytestmark = pytest.mark.integration

STEPS = 3
FAST = ["--tiny", "--steps", str(STEPS), "--actors.num_actors", "1", "--actors.engine_process", "separate",
        "--data.eval_every", "0", "--data.eval_n", "1", "--data.eval_max_problems", "4"]
# vLLM's fused parameters, and the HF ones each is made of
FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
         "up_proj": "gate_up_proj"}


def learner_checksums(state: dict) -> dict[str, float]:
    """float64 sums of the learner's parameters under vLLM's names (fused parameters summed)."""
    out: dict[str, float] = defaultdict(float)
    for name, t in state.items():
        out[".".join(FUSED.get(part, part) for part in name.split("."))] += float(t.double().sum())
    return dict(out)


def _status_at(actor, version: int, timeout_s: float = 180.0) -> dict:
    deadline, status = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        status = ray.get(actor.status.remote(), timeout=timeout_s)
        if status["version"] == version:
            return status
        time.sleep(0.2)
    raise AssertionError(f"the engine never reached version {version}: {status}")


def _gone(pids, timeout_s: float = 15.0) -> list[int]:
    """The pids still running (not zombies) after up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


class EngineChecks:
    """``on_step`` of the driver: the engine against the learner after every step."""

    def __init__(self, kill_after_last_step: bool = False):
        self.kill_after_last_step = kill_after_last_step
        self.sums: list[dict[str, float]] = []
        self.engine_pids: set[int] = set()
        self.killed: dict = {}
        self.killed_shm: set[str] = set()      # vLLM's queues the SIGKILLed engine had mapped

    def __call__(self, learner, actors, metrics: dict) -> None:
        [actor] = actors
        status = _status_at(actor, learner.version)
        pids = ray.get(actor.engine_pids.remote())
        assert pids, f"actor {status['pid']}: no engine process (the engine core runs in-process)"
        self.engine_pids.update(pids)
        self.check_weights(learner, actor)
        if self.kill_after_last_step and learner.steps_done == STEPS:
            self.killed_shm = _mapped_shm([status["pid"], *pids])
            os.kill(status["pid"], signal.SIGKILL)
            left = _gone(pids)
            self.killed = {"pid": status["pid"], "engine_pids": pids, "left": left}
            assert not left, f"engine processes {left} outlived their SIGKILLed actor {status['pid']}"
            restarted = _status_at(actor, learner.version)       # Ray restarts it; it loads the current version
            assert restarted["pid"] != status["pid"]
            self.engine_pids.update(ray.get(actor.engine_pids.remote()))
            self.check_weights(learner, actor, moved=False)

    def check_weights(self, learner, actor, moved: bool = True) -> None:
        """``moved``: a new version since the last check (else the same one, e.g. after a restart)."""
        engine = ray.get(actor.param_checksums.remote())
        want = learner_checksums(learner.full_state_dict())
        assert set(engine) <= set(want), f"engine parameters without a learner counterpart: {set(engine) - set(want)}"
        assert "model.embed_tokens.weight" in engine and any("qkv_proj.bias" in n for n in engine), sorted(engine)
        wrong = {n: (v, want[n]) for n, v in engine.items() if v != pytest.approx(want[n], rel=1e-9, abs=1e-9)}
        assert not wrong, f"version {learner.version}: engine != learner: {wrong}"
        if self.sums:
            assert (engine != self.sums[-1]) == moved, f"version {learner.version}: moved={moved} expected"
        self.sums.append(engine)


def _mapped_shm(pids) -> set[str]:
    """The multiprocessing shared memory and semaphores (vLLM's queues) the processes ``pids`` have mapped."""
    names = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if "/dev/shm/" in line:
                names.add(line.rsplit("/dev/shm/", 1)[1].split()[0])
    return {n for n in names if n.startswith(("psm_", "sem.mp-"))}


def _shm() -> set[str]:
    """vLLM's shared-memory message queues and lagrl's staged versions in /dev/shm."""
    return {p.name for p in Path("/dev/shm").glob("*") if p.name.startswith(("psm_", "lagrl-weights-"))}


def _run(tmp_path, run_id: str, args: list[str], checks: EngineChecks):
    from launch.run.compose import build_config
    from launch.run.driver import run

    shm_before = _shm()
    cfg, _ = build_config([*FAST, *args, "--run_dir", str(tmp_path / "runs"), "--run_id", run_id],
                          default_preset="onpolicy")
    assert cfg.actors.engine_process == "separate"
    t0 = time.monotonic()
    result = run(cfg, on_step=checks)
    print(f"[{run_id}] {STEPS} steps with the engine out of process in {time.monotonic() - t0:.1f} s")
    rows = [m for m in result.metrics if "lag/max" in m]
    assert len(rows) == STEPS and len(checks.sums) >= STEPS
    assert all(r["mode"] == "on_policy" and r["lag/max"] == 0 and r["lag/straddled"] == 0 for r in rows), rows
    engine_log = "".join(p.read_text() for p in (result.run_path / "logs").glob("lagrl-gen-*.log"))
    assert f"lagrl: loaded version {STEPS} from " in engine_log      # logged by the engine's own process
    kl = [r["mismatch/kl_k3"] for r in rows]
    print(f"[{run_id}] mismatch KL per step: {kl}")
    assert max(kl) < 1e-9
    left = _gone(checks.engine_pids)
    assert not left, f"engine processes {left} outlived the run's actors"
    left = _shm() - shm_before
    killed = {p.name for p in Path("/dev/shm").glob("*") if p.name in checks.killed_shm}
    for name in killed:
        (Path("/dev/shm") / name).unlink()
    print(f"[{run_id}] left in /dev/shm by the SIGKILLed actor and engine (removed): {sorted(killed)}")
    assert not left - checks.killed_shm, f"left in /dev/shm: {sorted(left - checks.killed_shm)}"
    return result


@pytest.mark.slow     # 55-100 s: out of the default run (~25 min), run with -m slow
def test_object_store_into_an_out_of_process_engine(ray_local, tmp_path, tiny_world):
    checks = EngineChecks(kill_after_last_step=True)
    _run(tmp_path, "sep-ray", ["--actors.max_restarts", "1"], checks)
    assert checks.killed and len(checks.sums) == STEPS + 1


# slow (~60 s): the default run has the collective into an engine process in the smoke's stage 3
# (checksum changed and restored exactly) and a collective run end to end in test_collective_run.py
@pytest.mark.slow
def test_collective_into_an_out_of_process_engine(ray_local, tmp_path, tiny_world):
    checks = EngineChecks()
    _run(tmp_path, "sep-coll", ["--actors.weight_transport", "collective", "--actors.collective.stale_after_s", "5",
                                "--actors.collective.heartbeat_s", "0.5", "--actors.max_restarts", "0"], checks)
