"""Engine logs: the reload's expected warnings are dropped, nothing else; the config routes vLLM to a file."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.engine_logs import (
    FAILED_TO_LOAD,
    RELOAD_LOGGER,
    ExpectedReloadWarnings,
    engine_logging_config,
    ties_embeddings,
)

REPO = Path(__file__).resolve().parents[2]


def _record(layer: str, name: str = RELOAD_LOGGER, msg: str = FAILED_TO_LOAD) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, "layerwise.py", 266, msg, (layer,), None)


@pytest.mark.parametrize("tied, layer, kept", [
    (True, "RotaryEmbedding", False), (True, "ParallelLMHead", False), (False, "RotaryEmbedding", False),
    (False, "ParallelLMHead", True),            # an untied head that loads nothing is a real failure
    (True, "QKVParallelLinear", True), (True, "VocabParallelEmbedding", True),
])
def test_only_expected_layers_are_dropped(tied, layer, kept):
    assert ExpectedReloadWarnings(tied).filter(_record(layer)) is kept


def test_other_messages_and_loggers_pass():
    f = ExpectedReloadWarnings(True)
    assert f.filter(_record("RotaryEmbedding", msg="%s: Excessive loading"))
    assert f.filter(_record("RotaryEmbedding", name="vllm.other"))


# route_engine_logs points this process's fds 1 and 2 at the log file and sets vLLM's environment,
# and dictConfig replaces logging handlers: all of that runs in a child so the test process keeps its own.
_CHILD = """
import json, logging, logging.config, os, sys
from actors.engine_logs import FAILED_TO_LOAD, RELOAD_LOGGER, route_engine_logs

log_dir, model, report = sys.argv[1:]
log_file = route_engine_logs(log_dir, "actor-0", model)
cfg = json.loads(open(os.environ["VLLM_LOGGING_CONFIG_PATH"]).read())
logging.config.dictConfig(cfg)                  # what vLLM does with it at import
logging.getLogger(RELOAD_LOGGER).warning(FAILED_TO_LOAD, "ParallelLMHead")
logging.getLogger(RELOAD_LOGGER).warning(FAILED_TO_LOAD, "QKVParallelLinear")
logging.getLogger("vllm.model_executor.model_loader.reload.inplace").info("Reloading weights inplace...")
print("printed after the redirect", flush=True)
os.write(2, b"fd 2 after the redirect\\n")
with open(report, "w") as f:
    json.dump({"log_file": str(log_file), "config": cfg, "configure": os.environ["VLLM_CONFIGURE_LOGGING"]}, f)
"""


def test_config_routes_vllm_to_the_file(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    assert ties_embeddings(model) and not ties_embeddings(tmp_path / "missing")

    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_LOGGING_CONFIG_PATH", "VLLM_CONFIGURE_LOGGING")}
    report, log_file = tmp_path / "report.json", tmp_path / "logs" / "actor-0.log"
    child = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "logs"), str(model), str(report)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    # nothing reaches the child's console: its output (a traceback too) is in the log file
    assert child.returncode == 0 and child.stdout == child.stderr == "", \
        (child.stderr, log_file.read_text() if log_file.exists() else "")
    got = json.loads(report.read_text())
    assert got["log_file"] == str(log_file) and got["configure"] == "1"
    assert got["config"] == engine_logging_config(log_file, tied_embeddings=True)
    text = log_file.read_text()
    assert "QKVParallelLinear: Failed to load weights" in text and "Reloading weights inplace" in text
    assert "ParallelLMHead" not in text
    assert "printed after the redirect" in text and "fd 2 after the redirect" in text
