"""Where a vLLM engine logs: a file in the run directory, not the run's console.

The console of a run shows the run's own progress (one line per learner step); an engine logs
a few lines per weight update and dozens at start-up. :func:`route_engine_logs` points vLLM's
logging (``VLLM_LOGGING_CONFIG_PATH``, so engine subprocesses on GPU follow too) at
``<run>/logs/<actor>.log``, and :func:`redirect_output` sends everything else the process
prints (warnings of its libraries, progress bars, C++ messages) to the same file. Both must run
before vLLM is imported in the process. Errors still reach the driver: exceptions travel back
through Ray, and an actor's loop errors are in its heartbeat.

Two warnings of vLLM's in-place reload are expected for every update and are dropped there too
(:class:`ExpectedReloadWarnings`): ``<Layer>: Failed to load weights`` for a layer that has
tensors but receives none from the checkpoint. For these layers that is the design, not a loss:

* ``RotaryEmbedding``: its cos/sin cache is computed from the config, never loaded;
* ``ParallelLMHead`` of a model with tied embeddings: it shares the embedding's weight, which is
  loaded (``tests/integration/test_actors.py::test_tied_lm_head_follows_the_new_embedding``
  checks the engine's log-probs against the learner's after an update of the embedding only).

Any other layer that fails to load still warns: that would be a real problem.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
FAILED_TO_LOAD = "%s: Failed to load weights"


class ExpectedReloadWarnings(logging.Filter):
    """Drops ``Failed to load weights`` for the layers the module docstring names, nothing else."""

    def __init__(self, tied_embeddings: bool = False):
        super().__init__()
        self.layers = {"RotaryEmbedding"} | ({"ParallelLMHead"} if tied_embeddings else set())

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == RELOAD_LOGGER and record.msg == FAILED_TO_LOAD
                    and record.args and record.args[0] in self.layers)


def ties_embeddings(model_dir: str | Path) -> bool:
    """Whether the HF checkpoint in ``model_dir`` ties its output layer to the input embedding."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(cfg.get("tie_word_embeddings", cfg.get("text_config", {}).get("tie_word_embeddings", False)))


def engine_logging_config(log_file: Path, tied_embeddings: bool) -> dict:
    """vLLM's default logging config (its formatter), written to ``log_file`` with the filter."""
    fmt = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"engine": {"format": fmt, "datefmt": "%m-%d %H:%M:%S"}},
        "filters": {"expected": {"()": "actors.engine_logs.ExpectedReloadWarnings",
                                 "tied_embeddings": tied_embeddings}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file), "formatter": "engine",
                              "filters": ["expected"], "level": "INFO"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }


def redirect_output(log_file: Path) -> None:
    """Point this process's stdout and stderr (the file descriptors, so C/C++ output too) at
    ``log_file``, appending; Ray then has nothing of this process to forward to the driver."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def route_engine_logs(log_dir: str | Path, name: str, model_dir: str | Path) -> Path:
    """Send this process's (and its engine subprocesses') vLLM logs to ``log_dir/name.log``."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / f"{name}.log"
    config = log_dir / f".{name}.logging.json"
    config.write_text(json.dumps(engine_logging_config(log_file, ties_embeddings(model_dir))))
    os.environ["VLLM_CONFIGURE_LOGGING"] = "1"
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config)
    redirect_output(log_file)
    return log_file
