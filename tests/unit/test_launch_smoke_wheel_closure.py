"""launch/ops/smoke/wheel_closure.py on hand-made wheels: what it accepts, what it refuses, and why."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("wheel_closure", REPO / "launch" / "ops" / "smoke" / "wheel_closure.py")
wc = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = wc          # its dataclasses look their module up
spec.loader.exec_module(wc)


def wheel(d: Path, name: str, version: str, requires: tuple[str, ...] = (), tags: str = "py3-none-any") -> None:
    meta = f"Metadata-Version: 2.1\r\nName: {name}\r\nVersion: {version}\r\n"     # CRLF, as some wheels have
    meta += "".join(f"Requires-Dist: {r}\r\n" for r in requires)
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(d / f"{dist}-{tags}.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)


def header(text: str, tmp: Path) -> wc.ListHeader:
    (tmp / "list.txt").write_text(text)
    return wc.read_header(tmp / "list.txt")


HEADER = """# host: torch==2.11.0 numpy
# forbid: torch triton nvidia-*
# omit: tilelang  not used here
# accept: tvm-ffi  newer on purpose
app==1.0
"""


@pytest.fixture
def house(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    wheel(d, "app", "1.0", ("lib>=2", "torch>=2.10", "numpy", "tilelang", "tvm-ffi==0.1",
                            "extra-only; extra == 'x'", "win-only; sys_platform == 'win32'",
                            "old-py; python_version < '3.11'"))
    wheel(d, "lib", "2.1", tags="cp312-cp312-manylinux_2_28_x86_64")
    wheel(d, "tvm-ffi", "0.2", tags="cp39-abi3-manylinux2014_x86_64")
    wheel(d, "interegular", "0.3", tags="py37-none-any")
    return d


def test_a_closed_wheelhouse_passes_with_notes(house, tmp_path):
    problems, notes, wheels = wc.check(house, header(HEADER, tmp_path), "app")
    assert problems == []
    assert any(n.startswith("accepted: app needs tvm-ffi==0.1") for n in notes)
    assert any(n.startswith("left out on purpose: tilelang (needed by app)") for n in notes)
    assert any("interegular" in n and n.startswith("not needed by app") for n in notes)
    assert {w.name for w in wheels} == {"app", "lib", "tvm-ffi", "interegular"}
    assert wc.glibc_needed(wheels) == (2, 28)        # lib's manylinux_2_28 is the newest any wheel needs


def test_extras_are_followed(house, tmp_path):
    problems, _, _ = wc.check(house, header(HEADER, tmp_path), "app[x]")
    assert problems == ["missing: extra-only; extra == \"x\" (needed by app); add a pin to the list, or a "
                        "'# host:' or '# omit:' line saying why not"]


def test_refuses_torch_duplicates_bad_tags_and_versions(house, tmp_path):
    wheel(house, "torch", "2.11.0", tags="cp312-cp312-manylinux_2_28_x86_64")
    wheel(house, "lib", "1.0")                                        # a second lib
    wheel(house, "nvidia-nccl-cu13", "2.28", tags="py3-none-manylinux_2_18_x86_64")
    wheel(house, "native", "1.0", tags="cp311-cp311-manylinux_2_17_x86_64")
    problems, _, _ = wc.check(house, header(HEADER, tmp_path), "app")
    text = "\n".join(problems)
    assert "two wheels of lib" in text
    assert "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl would replace a package of the host's torch" in text
    assert "nvidia_nccl_cu13-2.28-py3-none-manylinux_2_18_x86_64.whl would replace" in text
    assert "native-1.0-cp311-cp311-manylinux_2_17_x86_64.whl: python tag cp311/cp311 is not for CPython 3.12" in text


def test_refuses_a_version_outside_the_range(house, tmp_path):
    next(house.glob("lib-2.1-*.whl")).unlink()
    wheel(house, "lib", "1.0")
    problems, _, _ = wc.check(house, header(HEADER, tmp_path), "app")
    assert problems == ["app needs lib>=2, the wheelhouse has lib 1.0"]


def test_host_versions_are_checked_as_notes(house, tmp_path):
    problems, notes, _ = wc.check(house, header(HEADER.replace("torch==2.11.0", "torch==2.9.0"), tmp_path), "app")
    assert problems == []
    assert "host clash: app needs torch>=2.10, the checked host has torch 2.9.0" in notes


def test_tags():
    def tags(t: str) -> wc.Wheel:
        return wc.Wheel(Path("x.whl"), "x", wc.Version("1"), t)
    assert wc.tag_problem(tags("py2.py3-none-any")) is None
    assert wc.tag_problem(tags("cp38-abi3-manylinux_2_28_x86_64")) is None
    assert wc.tag_problem(tags("py313-none-any")) == "python tag py313/none is not for CPython 3.12"
    assert wc.tag_problem(tags("cp312-cp312-manylinux_2_17_aarch64")) == \
        "platform manylinux_2_17_aarch64 is not manylinux x86-64"
