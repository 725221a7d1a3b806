"""Where the engine core runs (ActorConfig.engine_process) and the watch that ties its processes to the actor.

The watch is exercised with real processes shaped like an actor's: an "actor" that starts an
"engine core", which starts a "tensor-parallel worker"; both run ``watch_owner`` as vLLM's worker
processes do when they import ``actors.worker_extension``. SIGKILL the actor: both must go.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from actors.config import ActorConfig
from actors.engine import OWNER_ENV, engine_process, set_engine_env, watch_owner

REPO = Path(__file__).resolve().parents[2]


def test_auto_is_separate_with_gpus_and_in_process_on_cpu():
    assert engine_process(ActorConfig()) == "in_process"
    assert engine_process(ActorConfig(num_gpus=1)) == "separate"
    assert engine_process(ActorConfig(engine_process="separate")) == "separate"
    assert engine_process(ActorConfig(num_gpus=1, engine_process="in_process")) == "in_process"
    with pytest.raises(ValueError):
        ActorConfig(engine_process="elsewhere")


def test_engine_env(monkeypatch):
    for key in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", OWNER_ENV):
        monkeypatch.delenv(key, raising=False)
    set_engine_env(ActorConfig(engine_process="separate", cpu_kv_cache_gib=3))
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"          # inherited by the engine core: it sizes the cache
    pid, _, created = os.environ[OWNER_ENV].partition(":")
    assert int(pid) == os.getpid() and float(created) == psutil.Process().create_time()
    assert watch_owner() is None                                 # in the actor itself: nothing to watch
    set_engine_env(ActorConfig())
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


CHILD = """
import subprocess, sys, time
from actors.engine import watch_owner
assert watch_owner(poll_s=0.1) is not None
if sys.argv[1] == "core":      # the engine core starts a tensor-parallel worker
    subprocess.Popen([sys.executable, "-c", sys.argv[2], "worker", sys.argv[2]])
time.sleep(120)
"""

ACTOR = """
import subprocess, sys, time
from actors.config import ActorConfig
from actors.engine import set_engine_env
set_engine_env(ActorConfig(engine_process="separate"))
subprocess.Popen([sys.executable, "-c", sys.argv[1], "core", sys.argv[1]])
time.sleep(120)
"""


def _running(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_engine_processes_die_with_their_actor():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    actor = subprocess.Popen([sys.executable, "-c", textwrap.dedent(ACTOR), textwrap.dedent(CHILD)], env=env)
    engine: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while len(engine := psutil.Process(actor.pid).children(recursive=True)) < 2:
            assert time.monotonic() < deadline, "the engine processes did not start"
            time.sleep(0.1)
        time.sleep(1.5)                                           # both watches running
        assert len(_running(engine)) == 2
        os.kill(actor.pid, signal.SIGKILL)
        actor.wait()
        deadline = time.monotonic() + 5
        while _running(engine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(engine), f"{_running(engine)} outlived the actor"
    finally:
        if actor.poll() is None:
            actor.kill()
        for p in engine:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
