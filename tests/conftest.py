"""Fixtures shared by every test: free ports, run directories, a loopback-only local Ray."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from actors.cluster.priority import SYSTEM_CONFIG

# vLLM on CPU: a small KV cache, and the engine core in-process (no extra subprocess to reap).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def find_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return find_free_port()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray for the whole session, bound to 127.0.0.1, no dashboard; shut down at the end."""
    import ray

    if not ray.is_initialized():
        # address="local": never attach to a cluster found via RAY_ADDRESS or /tmp/ray.
        ray.init(address="local", num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=True, configure_logging=False, _system_config=SYSTEM_CONFIG,
                 runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_world():
    """The cached tiny world (tokenizer, Qwen2 model, data); built once (~30 s) if missing."""
    from launch.worlds.tiny.build import ensure_tiny_world

    return ensure_tiny_world()


@pytest.fixture(scope="session")
def reasoning_world():
    """The cached reasoning world (launch.worlds.reasoning); built once (~4 min on 2 cores) if missing."""
    from launch.worlds.reasoning.build import ensure_reasoning_world

    return ensure_reasoning_world()


@pytest.fixture(scope="session")
def code_world():
    """The cached code world (launch.worlds.code: a+b and one-line programs); built once (~1-2 min) if missing."""
    from launch.worlds.code.build import ensure_code_world

    return ensure_code_world()


@pytest.fixture(scope="session")
def routes_world():
    """The cached routes world (launch.worlds.routes: sums along many routes, entropy to lose); built once
    (~3 min on 2 cores) if missing."""
    from launch.worlds.routes.build import ensure_routes_world

    return ensure_routes_world()
