"""launch.ops.prepare: the model-info cache check agrees with vLLM's own key, so setup warms exactly what an
engine would otherwise compute on its first start; bytecode compiles."""

from __future__ import annotations

import json

from launch.ops.prepare import MODEL_ARCHS, compile_bytecode, model_info_cached, vllm_cache_root


def _write_cache(root, arch: str, module: str, digest: str) -> None:
    d = root / "modelinfos"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{module.replace('.', '-')}-{arch}.json").write_text(json.dumps({"hash": digest, "modelinfo": {}}))


def test_cache_root_follows_vllm_envs(monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert vllm_cache_root() == tmp_path / "xdg" / "vllm"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "v"))
    assert vllm_cache_root() == tmp_path / "v"


def test_model_info_check_uses_vllms_key(monkeypatch, tmp_path):
    from pathlib import Path

    from vllm.model_executor.models import registry

    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))
    [(arch, module)] = MODEL_ARCHS.items()
    assert not model_info_cached(arch, module)                                 # empty cache
    model_file = Path(registry.__file__).parent / f"{module.rsplit('.', 1)[1]}.py"
    key = registry._LazyRegisteredModel._get_modelinfo_module_hash(model_file)  # what vLLM writes and compares
    _write_cache(tmp_path, arch, module, "0" * 32)
    assert not model_info_cached(arch, module)                                 # stale: another vLLM's file
    _write_cache(tmp_path, arch, module, key)
    assert model_info_cached(arch, module)


def test_bytecode_compiles(tmp_path):
    pkg = tmp_path / "actors"
    pkg.mkdir()
    (pkg / "a.py").write_text("X = 1\n")
    assert compile_bytecode(tmp_path)
    assert list((pkg / "__pycache__").glob("a.*.pyc"))
    (pkg / "b.py").write_text("def broken(:\n")
    assert not compile_bytecode(tmp_path)
