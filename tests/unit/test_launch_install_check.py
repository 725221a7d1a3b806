"""The generic top-level names (buffer, launch, ...) resolve to this checkout, and a clash is reported."""

from pathlib import Path

import pytest

from launch import install_check

REPO = Path(__file__).resolve().parents[2]


def test_every_package_is_this_checkouts():
    import actors  # noqa: E401
    import buffer
    import launch
    import learner
    import rewards

    assert install_check.problems() == []
    for module in (actors, buffer, launch, learner, rewards):
        assert Path(module.__file__).resolve().parent == REPO / module.__name__


def test_another_distribution_with_the_same_name_is_reported(monkeypatch):
    monkeypatch.setattr(install_check, "packages_distributions",
                        lambda: {"buffer": ["lagrl", "buffer"], "launch": ["lagrl"]})
    found = install_check.problems()
    assert found == ["top-level package 'buffer' is also provided by buffer: uninstall it or give lagrl "
                     "its own virtual environment"]
    with pytest.raises(SystemExit, match="package names are shadowed"):
        install_check.require_own_packages()


def test_a_package_loaded_from_elsewhere_is_reported(monkeypatch, tmp_path):
    (tmp_path / "learner").mkdir()
    (tmp_path / "learner" / "__init__.py").write_text("")
    real = install_check.importlib.util.find_spec
    monkeypatch.setattr(install_check.importlib.util, "find_spec",
                        lambda name: real(name) if name != "learner" else
                        install_check.importlib.util.spec_from_file_location("learner", tmp_path / "learner" / "__init__.py"))
    assert any(f"import learner resolves to {tmp_path / 'learner'}" in p for p in install_check.problems())
