"""Do once, at setup, what a first run would otherwise do (``.ci/setup`` runs it; idempotent):

    python -m launch.ops.prepare            # each step is skipped when already done (about 1 s then)

- Python bytecode of the project's packages (``compileall``; pip compiled the venv's packages);
- vLLM's inspection of the model class the CPU worlds use (``Qwen2ForCausalLM``): on its first use
  an engine runs it in a subprocess that imports vLLM (10-20 s on 2 cores) and caches the answer in
  ``$VLLM_CACHE_ROOT/modelinfos`` (default ``~/.cache/vllm``) keyed by the model file's hash;
- the worlds of :data:`SETUP_WORLDS` (the tiny world, which ``--tiny`` and the tests use), built
  through the world registry (``launch.worlds``) into ``$LAGRL_CACHE``.

Nothing here compiles an op: DeepSpeed's CPU shared-memory comm op is never built
(``learner.deepspeed_kit.init_distributed``), nor is FusedAdam (``learner.optimizer``).
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.util
import json
import os
import time
from pathlib import Path

from launch.worlds import entry, load
from launch.worlds.cache import REPO_ROOT

SETUP_WORLDS = ("tiny",)      # names in launch.worlds.WORLDS; the others are built on first use
PACKAGES = ("actors", "buffer", "launch", "learner", "rewards", "bench", "tests")
MODEL_ARCHS = {"Qwen2ForCausalLM": "vllm.model_executor.models.qwen2"}


def compile_bytecode(root: Path = REPO_ROOT) -> bool:
    """Byte-compile the project (only what changed); True when every file compiled."""
    ok = True
    for name in PACKAGES:
        if (root / name).is_dir():
            ok &= bool(compileall.compile_dir(str(root / name), quiet=1, workers=0))
    return ok


def vllm_cache_root() -> Path:
    """vLLM's cache directory as ``vllm.envs.VLLM_CACHE_ROOT`` computes it (without importing vLLM)."""
    default = os.path.join(os.getenv("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "vllm")
    return Path(os.path.expanduser(os.getenv("VLLM_CACHE_ROOT", default)))


def model_info_cached(arch: str, module: str) -> bool:
    """True when vLLM's model-info cache holds ``arch`` for the installed model file (the hash vLLM
    keys it by: md5 over the file's name and bytes), so no engine will run the inspection subprocess."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    path = Path(next(iter(spec.submodule_search_locations))) / Path(*module.split(".")[1:]).with_suffix(".py")
    cache = vllm_cache_root() / "modelinfos" / f"{module.replace('.', '-')}-{arch}.json"
    if not path.exists() or not cache.exists():
        return False
    digest = hashlib.md5(b"", usedforsecurity=False)
    for part in (path.name.encode(), b"\0", path.read_bytes(), b"\0"):
        digest.update(part)
    try:
        return json.loads(cache.read_text())["hash"] == digest.hexdigest()
    except (OSError, ValueError, KeyError):
        return False


def warm_model_info(arch: str) -> None:
    """Run vLLM's model-class inspection now (a subprocess) so its cache holds the answer."""
    from vllm.model_executor.models.registry import ModelRegistry

    ModelRegistry.models[arch].inspect_model_cls()


def main() -> None:
    t0 = time.monotonic()
    done = []
    if not compile_bytecode():
        raise SystemExit("[prepare] compileall failed: a project file does not compile")
    done.append("bytecode")
    for arch, module in MODEL_ARCHS.items():
        if not model_info_cached(arch, module):
            warm_model_info(arch)
            done.append(f"vLLM model info {arch}")
    worlds = [f"{name} world {load(entry(name).build)(log=lambda line: print(line, flush=True)).root}"
              for name in SETUP_WORLDS]
    print(f"[prepare] ok in {time.monotonic() - t0:.0f} s: {', '.join(done + worlds)}", flush=True)


if __name__ == "__main__":
    main()
