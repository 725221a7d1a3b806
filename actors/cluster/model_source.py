"""How the run's model directory reaches every process, on any node, with no shared filesystem.

``data.model_source`` picks one of two ways (the driver decides once, :func:`share_model`):

- ``shared``: ``data.model_dir`` is on storage that every node mounts at the same path (NFS, a
  baked image, a local copy made beforehand). Every process opens it as is.
- ``object_store``: the driver reads the directory once into Ray's object store, in pieces of at
  most ``PIECE_BYTES`` (HF config, tokenizer, safetensors: every regular file, hidden ones
  skipped), and records a manifest (relative path, size, SHA-256 of each file). A process on any
  node materialises it into a node-local, content-addressed cache,
  ``<cache>/models/<digest>/``, where ``<cache>`` is ``$LAGRL_NODE_CACHE`` or the Ray node's
  temp dir + ``/lagrl-cache``: the first process of a node writes it (under a file lock, into
  a temp dir renamed when every file's SHA-256 matched), the others and any actor Ray restarts
  on that node reuse it. Peak extra memory per process is one piece.
- ``auto`` (the default): ``object_store`` when the Ray cluster has more than one alive node,
  else ``shared`` (a single machine: the path is there; nothing is copied).

A process that cannot reach its model raises :class:`ModelUnavailable`, which names the path, the
way it was to arrive, and the node (name, IP, Ray node id).

The ``ModelSource`` travels as an argument of the actor / rank constructors; the object refs in it
are owned by the driver, so the pieces live as long as the run does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

PIECE_BYTES = 64 << 20
COMPLETE = ".lagrl-complete"      # written last into a materialised directory (hidden: never packed)
ModelMode = Literal["auto", "shared", "object_store"]


class ModelUnavailable(FileNotFoundError):
    """The model directory cannot be opened or fetched on this node."""


@dataclass(frozen=True)
class ModelFile:
    path: str                       # relative to the model directory
    size: int
    sha256: str
    pieces: tuple[Any, ...] = ()    # ObjectRefs of the bytes in order (object_store only)


@dataclass(frozen=True)
class ModelSource:
    """Where a process finds the model: ``path`` as the driver sees it, and how it travels."""

    path: str
    mode: Literal["shared", "object_store"]
    digest: str | None = None       # content address of the files (object_store)
    files: tuple[ModelFile, ...] = ()

    def __str__(self) -> str:
        return self.path

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files)

    def describe(self) -> dict:
        """For the run's meta and logs (no refs)."""
        return {"model_dir": self.path, "model_source": self.mode, "model_digest": self.digest or "",
                "model_bytes": self.nbytes}


# --- driver side ---------------------------------------------------------------------------------
def model_files(root: Path) -> list[Path]:
    """The regular files of a model directory, hidden files and directories skipped, in order."""
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))


def resolve_mode(mode: ModelMode) -> Literal["shared", "object_store"]:
    if mode != "auto":
        return mode
    from actors.cluster.placement import alive_nodes

    return "object_store" if len(alive_nodes()) > 1 else "shared"


def share_model(path: str | Path, mode: ModelMode = "auto") -> ModelSource:
    """The driver's half: check the directory, and put it into the object store if needed."""
    root = Path(path)
    if not (root / "config.json").is_file():
        raise ModelUnavailable(f"model directory {root} has no config.json on the driver's node {node_description()}")
    resolved = resolve_mode(mode)
    if resolved == "shared":
        return ModelSource(path=str(root), mode="shared")
    import ray

    files, manifest = [], []
    for f in model_files(root):
        digest, pieces, size = hashlib.sha256(), [], 0
        with open(f, "rb") as src:
            while chunk := src.read(PIECE_BYTES):
                digest.update(chunk)
                pieces.append(ray.put(chunk))
                size += len(chunk)
        rel = f.relative_to(root).as_posix()
        files.append(ModelFile(rel, size, digest.hexdigest(), tuple(pieces)))
        manifest.append([rel, size, digest.hexdigest()])
    content = hashlib.sha256(json.dumps(manifest).encode()).hexdigest()
    return ModelSource(path=str(root), mode="object_store", digest=content, files=tuple(files))


# --- any process ---------------------------------------------------------------------------------
def node_description() -> str:
    """``name (ip, node id)`` of the Ray node this process runs on (best effort outside Ray)."""
    import socket

    try:
        import ray

        if not ray.is_initialized():
            raise RuntimeError
        node_id = ray.get_runtime_context().get_node_id()
        node = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
        return f"{node.get('NodeName') or socket.gethostname()} ({node.get('NodeManagerAddress', '?')}, node id {node_id})"
    except Exception:
        return f"{socket.gethostname()} (not in a Ray cluster)"


def node_cache_root() -> Path:
    """``$LAGRL_NODE_CACHE``, else ``<Ray node temp dir>/lagrl-cache``: node-local disk."""
    if os.environ.get("LAGRL_NODE_CACHE"):
        return Path(os.environ["LAGRL_NODE_CACHE"])
    try:
        import ray

        return Path(ray._private.worker.global_worker.node.get_temp_dir_path()) / "lagrl-cache"
    except Exception:                 # not a Ray worker: the machine's temp dir
        import tempfile

        return Path(tempfile.gettempdir()) / "lagrl-cache"


def resolve_model_dir(model: str | Path | ModelSource) -> str:
    """The directory to open on this node: the shared path, or the node-local materialised copy."""
    if not isinstance(model, ModelSource):
        model = ModelSource(path=str(model), mode="shared")
    if model.mode == "shared":
        if not (Path(model.path) / "config.json").is_file():
            raise ModelUnavailable(
                f"model directory {model.path} is not readable on node {node_description()}: "
                f"data.model_source 'shared' needs it at that path on every node; use 'object_store' "
                f"(or 'auto' on a multi-node cluster) to send it through Ray instead")
        return model.path
    return str(materialise(model, node_cache_root()))


def materialise(model: ModelSource, cache_root: Path) -> Path:
    """``cache_root/models/<digest>`` with every file of ``model``; written once per node."""
    target = cache_root / "models" / model.digest
    if (target / COMPLETE).exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelUnavailable(f"model {model.path} (digest {model.digest[:12]}): cannot create the node cache "
                               f"{target.parent} on node {node_description()}: {exc}") from exc
    with open(target.parent / f".{model.digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # one writer per node; the others wait, then reuse
        if (target / COMPLETE).exists():
            return target
        tmp = target.parent / f".{model.digest}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            for f in model.files:
                _fetch_file(model, f, tmp / f.path)
            (tmp / COMPLETE).write_text(json.dumps({"source": model.path, "digest": model.digest,
                                                    "files": [[f.path, f.size, f.sha256] for f in model.files]}))
            shutil.rmtree(target, ignore_errors=True)      # a half-written copy of a crashed process
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _fetch_file(model: ModelSource, f: ModelFile, dst: Path) -> None:
    import ray

    dst.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        with open(dst, "wb") as out:
            for piece in f.pieces:
                data = ray.get(piece)
                digest.update(data)
                out.write(data)
    except ModelUnavailable:
        raise
    except Exception as exc:
        raise ModelUnavailable(f"model {model.path}: {f.path} could not be fetched from the object store onto "
                               f"node {node_description()}: {type(exc).__name__}: {exc}") from exc
    if digest.hexdigest() != f.sha256:
        raise ModelUnavailable(f"model {model.path}: {f.path} arrived on node {node_description()} with SHA-256 "
                               f"{digest.hexdigest()[:12]}, expected {f.sha256[:12]}")
