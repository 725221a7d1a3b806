"""The one way a CPU world (``launch.worlds``) is built once and shared.

A world is a directory under ``$LAGRL_CACHE`` (default ``<repo>/.cache``) holding ``world.json``
last. Builds are serialised with a file lock (parallel test workers wait instead of building
twice) and atomic (a temp directory renamed into place), so no reader ever sees half a world.
Everything a build writes is a function of its seed, so two builds give byte-identical files; the
manifest records their SHA-256 (:func:`sha256_file`) so a test can prove it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class World:
    """A built world: a Hugging Face model directory (config, weights, tokenizer), the task's
    train/validation JSONL and the build manifest."""
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def train_path(self) -> Path:
        return self.root / "data" / "train.jsonl"

    @property
    def val_path(self) -> Path:
        return self.root / "data" / "val.jsonl"

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / "world.json").read_text())


def default_cache_dir() -> Path:
    return Path(os.environ.get("LAGRL_CACHE", REPO_ROOT / ".cache"))


def ensure_built(name: str, build: Callable[[Path], dict], cache_dir: Path | None = None) -> tuple[Path, dict | None]:
    """``(cache_dir/name, manifest)``: ``build(tmp_dir)`` writes the world and returns its manifest
    (which it also writes as ``world.json``); the manifest is None when the world was already there."""
    cache_dir = Path(cache_dir or default_cache_dir())
    cache_dir.mkdir(parents=True, exist_ok=True)
    root = cache_dir / name
    with open(cache_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "world.json").exists():
            return root, None
        tmp = cache_dir / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            manifest = build(tmp)
            os.replace(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root, manifest


def ensure_world(name: str, build: Callable[[Path], dict], cache_dir: Path | None = None, log=print) -> World:
    """The world cached as ``cache_dir/name``, built first with ``build(tmp_dir) -> manifest`` when
    missing; the log lines say which world (the part of ``name`` before its first dash) is built."""
    tag = name.split("-")[0]

    def logged(tmp: Path) -> dict:
        log(f"[{tag}] building {Path(cache_dir or default_cache_dir()) / name} ...")
        return build(tmp)

    root, manifest = ensure_built(name, logged, cache_dir)
    if manifest is not None:
        warmup = manifest.get("warmup")
        log(f"[{tag}] built in {manifest['build_seconds']}s" + (
            f"; warm-up accuracy {warmup['accuracy']:.3f} after {warmup['steps']} steps" if warmup else ""))
    return World(root)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
