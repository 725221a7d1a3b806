"""Engine logs: the reload's expected warnings are dropped, nothing else; the config routes vLLM to a file."""

import json
import logging
import logging.config
import os

import pytest

from actors.engine_logs import (
    FAILED_TO_LOAD,
    RELOAD_LOGGER,
    ExpectedReloadWarnings,
    engine_logging_config,
    route_engine_logs,
    ties_embeddings,
)


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


def test_config_routes_vllm_to_the_file(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    assert ties_embeddings(model) and not ties_embeddings(tmp_path / "missing")
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    log_file = route_engine_logs(tmp_path / "logs", "actor-0", model)

    cfg = json.loads(open(os.environ["VLLM_LOGGING_CONFIG_PATH"]).read())
    assert cfg == engine_logging_config(log_file, tied_embeddings=True)
    logging.config.dictConfig(cfg)                  # what vLLM does with it at import
    logging.getLogger(RELOAD_LOGGER).warning(FAILED_TO_LOAD, "ParallelLMHead")
    logging.getLogger(RELOAD_LOGGER).warning(FAILED_TO_LOAD, "QKVParallelLinear")
    logging.getLogger("vllm.model_executor.model_loader.reload.inplace").info("Reloading weights inplace...")
    for h in logging.getLogger("vllm").handlers:
        h.flush()
    text = log_file.read_text()
    assert "QKVParallelLinear: Failed to load weights" in text and "Reloading weights inplace" in text
    assert "ParallelLMHead" not in text
    logging.getLogger("vllm").handlers.clear()
