"""Learner checkpoints: HF weights, DeepSpeed state, controller/RNG state, consumed group ids.

Layout under ``{run_dir}/checkpoints/``::

    step_000012/
        hf/                    save_pretrained of the unwrapped model + the init dir's tokenizer
                               files: loadable by transformers and vLLM as is
        deepspeed/state/       engine.save_checkpoint: module, optimizer, lr scheduler (per rank)
        rng_rank{r}.pt         torch / numpy / python (/ cuda) RNG states of rank r
        prm/                   PRIME runs only: the implicit PRM, saved like the policy (hf/,
                               deepspeed/state/ with its own optimizer, rng_rank{r}.pt); its
                               ``version`` counts PRM updates. Committed by the same ``latest``.
        learner.json           coordinator state (LearnerState): step, version, entropy
                               controller, ids of the groups trained since the previous
                               checkpoint, buffer stream position, resolved config
    latest                     name of the newest *complete* checkpoint (written last, atomically)

Exactly-once with the buffer: groups are ACKed only after the checkpoint that covers them is
committed (``latest`` replaced). A crash before that leaves them pending for the learner's
consumer, so the restarted learner re-reads and retrains them (they are not in the restored
weights). A crash between commit and ACK leaves groups pending that *are* in the weights:
their ids are in ``learner.json``, so the restarted learner ACKs and skips them.

Where: ``{run_dir}/checkpoints/`` by default, or ``{learner.checkpoint_dir}/{run_id}/checkpoints/``.
Every rank writes to the same directory and the coordinator (in the driver) commits it, so with
ranks on other nodes that directory must be shared storage mounted at the same path by the driver
and every learner node; :func:`require_visible` refuses to commit a checkpoint the driver cannot
see, and a learner restarted on any node resumes from it. Checkpoint cost (full HF copy + optimizer state every K steps) is the
``checkpoint_every`` trade-off: rarely means more retraining after a crash, never more loss.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINTS = "checkpoints"
DS_TAG = "state"
PRM_DIR = "prm"           # the PRIME PRM's subdirectory of a checkpoint
_WEIGHT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json")


@dataclass
class LearnerState:
    """What the coordinator needs to continue exactly where a checkpoint left off."""

    step: int                       # learner steps completed
    version: int                    # optimizer updates applied (= policy version)
    entropy_controller: dict[str, Any]
    group_ids: list[str]            # groups trained since the previous checkpoint
    stream_position: Any = None     # buffer.stream_position() at save time (for audits)
    guard: dict[str, Any] | None = None   # the lag guard's state (learner.guard), when it is on
    config: dict[str, Any] = field(default_factory=dict)
    saved_at: float = 0.0


def checkpoints_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return checkpoints_root(run_dir) / f"step_{step:06d}"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest committed checkpoint, or None."""
    marker = checkpoints_root(run_dir) / "latest"
    if not marker.exists():
        return None
    path = checkpoints_root(run_dir) / marker.read_text().strip()
    return path if (path / "learner.json").exists() else None


class CheckpointNotShared(RuntimeError):
    """The ranks wrote a checkpoint that the coordinator cannot see: not shared storage."""


def require_visible(ckpt: Path, world: int, writers: str = "") -> None:
    """Every rank's files of ``ckpt`` are visible here (``writers``: where the ranks run, for the error)."""
    missing = [f"rng_rank{r}.pt" for r in range(world) if not (ckpt / f"rng_rank{r}.pt").exists()]
    missing += [] if (ckpt / "hf" / "config.json").exists() else ["hf/config.json"]
    if missing:
        raise CheckpointNotShared(
            f"checkpoint {ckpt}: {', '.join(missing)} written by the learner ranks{writers} are not visible from "
            f"the driver: learner.checkpoint_dir must be shared storage that the driver and every learner "
            f"node mount at the same path")


def write_learner_state(ckpt: Path, state: LearnerState) -> None:
    _atomic_write(ckpt / "learner.json", json.dumps(asdict(state), indent=1, default=str))


def read_learner_state(ckpt: Path) -> LearnerState:
    return LearnerState(**json.loads((ckpt / "learner.json").read_text()))


def commit(run_dir: str | Path, ckpt: Path, keep: int) -> None:
    """Point ``latest`` at ``ckpt`` (the commit point), then prune all but the newest ``keep``."""
    root = checkpoints_root(run_dir)
    _atomic_write(root / "latest", ckpt.name)
    done = sorted(p for p in root.glob("step_*") if (p / "learner.json").exists())
    for old in done[:-keep]:
        if old != ckpt:
            shutil.rmtree(old, ignore_errors=True)
    for partial in root.glob("step_*"):   # leftovers of a crash mid-save
        if not (partial / "learner.json").exists() and partial != ckpt:
            shutil.rmtree(partial, ignore_errors=True)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    with open(tmp) as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def copy_tokenizer_files(src: str | Path, dst: Path) -> None:
    """Copy everything but weights and model config from the init dir (tokenizer, templates)."""
    for f in Path(src).iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt") and f.name not in _WEIGHT_FILES \
                and not (dst / f.name).exists():
            shutil.copy2(f, dst / f.name)


# --- rank side ------------------------------------------------------------------------------
def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rank(rank_engine, ckpt: Path, init_model_dir: str | Path) -> None:
    """Collective: every rank calls it. DeepSpeed state + RNG per rank; HF weights from rank 0."""
    ckpt.mkdir(parents=True, exist_ok=True)
    eng = rank_engine.engine
    eng.save_checkpoint(str(ckpt / "deepspeed"), tag=DS_TAG,
                        client_state={"version": rank_engine.version}, save_latest=False)
    torch.save(_rng_state(), ckpt / f"rng_rank{rank_engine.rank}.pt")
    state_dict = rank_engine.full_state_dict()          # gathers under ZeRO-3 (all ranks)
    if rank_engine.rank == 0:
        hf = ckpt / "hf"
        hf.mkdir(exist_ok=True)
        eng.module.save_pretrained(str(hf), state_dict=state_dict, safe_serialization=True)
        copy_tokenizer_files(init_model_dir, hf)
    if rank_engine.world > 1:
        torch.distributed.barrier()


def load_rank(rank_engine, ckpt: Path) -> int:
    """Restore module, optimizer, scheduler and RNG of this rank; returns the saved version."""
    _, client = rank_engine.engine.load_checkpoint(str(ckpt / "deepspeed"), tag=DS_TAG,
                                                    load_optimizer_states=True, load_lr_scheduler_states=True)
    if client is None:
        raise FileNotFoundError(f"no DeepSpeed checkpoint under {ckpt / 'deepspeed'}")
    rank_engine.version = int(client["version"])
    rng = ckpt / f"rng_rank{rank_engine.rank}.pt"
    if rng.exists():
        _set_rng_state(torch.load(rng, weights_only=False))
    return rank_engine.version
