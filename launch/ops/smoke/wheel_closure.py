"""Check a wheelhouse for an offline host: one wheel per name, none that replaces the host's torch,
tags the host can install, and every requirement reachable from the root satisfied.

    python launch/ops/smoke/wheel_closure.py WHEEL_DIR --list .ci/gpu-wheels-py312-torch2.11-cu13.txt --root 'lagrl[gpu,dev]'

The list file's header says what the host brings and what is left out on purpose:

    # host: torch==2.11.0 numpy transformers    what the host already has (never shipped); a version, where
                                                 known, is checked like a wheel's (a clash is a note: the
                                                 host's packages are not ours to change)
    # forbid: torch triton nvidia-* ...         shell patterns: a wheel of that name is an error
    # omit: tilelang  why it is not needed       a requirement left unmet on purpose
    # accept: apache-tvm-ffi  why                a version outside a requirement's range, on purpose

Every ``Requires-Dist`` of every wheel reached from ``--root`` (markers evaluated for CPython 3.12
on Linux x86-64, extras followed) must be met by a wheel of a matching version, the host, or an
``omit`` line. Prints one line per wheel (size, what needs it) and exits 1 on any problem. Only
the standard library and pip's vendored ``packaging``: it runs with any python3 that has pip.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
import zipfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.markers import Marker  # noqa: F401
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:
    sys.exit("wheel_closure needs the 'packaging' module: run it with the project's venv "
             "(PYTHON=.venv/bin/python .ci/gpu_wheelhouse.sh ...) or pip install packaging")

# The target host: CPython 3.12 on Linux x86-64 (what `python3 -m pip download --python-version 3.12` fetched for).
MARKER_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "os_name": "posix", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "platform_python_implementation": "CPython",
              "implementation_name": "cpython", "implementation_version": "3.12.3", "platform_release": "",
              "platform_version": ""}
PYTHON_TAG = re.compile(r"py3|py3(\d+)|cp312")          # py37 .. py312 install on 3.12 too
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_x86_64|manylinux(1|2010|2014)_x86_64")
LEGACY_GLIBC = {"1": (2, 5), "2010": (2, 12), "2014": (2, 17)}


@dataclass
class Wheel:
    path: Path
    name: str
    version: Version
    tags: str
    requires: list[Requirement] = field(default_factory=list)
    needed_by: set[str] = field(default_factory=set)

    @property
    def mib(self) -> float:
        return self.path.stat().st_size / 2**20


@dataclass
class ListHeader:
    host: dict[str, Version | None] = field(default_factory=dict)
    forbid: list[str] = field(default_factory=list)
    omit: dict[str, str] = field(default_factory=dict)
    accept: dict[str, str] = field(default_factory=dict)


def read_header(list_file: Path) -> ListHeader:
    header = ListHeader()
    for line in list_file.read_text().splitlines():
        m = re.match(r"#\s*(host|forbid|omit|accept):\s*(.*)", line)
        if not m:
            continue
        kind, rest = m.groups()
        if kind == "host":
            for item in rest.split():
                name, _, version = item.partition("==")
                header.host[canonicalize_name(name)] = Version(version) if version else None
        elif kind == "forbid":
            header.forbid += rest.split()
        else:
            name, _, why = rest.partition(" ")
            getattr(header, kind)[canonicalize_name(name)] = why.strip()
    return header


def read_wheel(path: Path) -> Wheel:
    parts = path.name[:-4].split("-")              # name-version(-build)?-python-abi-platform
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        text = zf.read(meta).decode("utf-8", "replace").replace("\r\n", "\n")
    fields = dict(re.findall(r"^(Name|Version): (.+)$", text, re.MULTILINE))
    requires = [Requirement(v) for v in re.findall(r"^Requires-Dist: (.+)$", text, re.MULTILINE)]
    return Wheel(path, canonicalize_name(fields["Name"]), Version(fields["Version"]), "-".join(parts[-3:]), requires)


def tag_problem(wheel: Wheel) -> str | None:
    """Why the host (CPython 3.12, Linux x86-64) cannot install this wheel, or None."""
    python, abi, platform = wheel.tags.split("-")
    pythons = python.split(".")
    plain = abi == "none" and any((m := PYTHON_TAG.fullmatch(p)) and int(m[1] or 0) <= 12 for p in pythons)
    abi3 = abi == "abi3" and any(re.fullmatch(r"cp3(\d+)", p) and int(p[3:]) <= 12 for p in pythons)
    if not (plain or abi3 or (abi == "cp312" and "cp312" in pythons)):
        return f"python tag {python}/{abi} is not for CPython 3.12"
    if platform != "any" and not all(MANYLINUX.fullmatch(p) for p in platform.split(".")):
        return f"platform {platform} is not manylinux x86-64"
    return None


def glibc_needed(wheels: list[Wheel]) -> tuple[int, int]:
    """The oldest glibc the host may have: the largest of each wheel's smallest manylinux tag."""
    need = (2, 5)
    for w in wheels:
        found = []
        for p in w.tags.split("-")[2].split("."):
            m = MANYLINUX.fullmatch(p)
            if m:
                found.append(LEGACY_GLIBC[m[3]] if m[3] else (int(m[1]), int(m[2])))
        if found:
            need = max(need, min(found))
    return need


def applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**MARKER_ENV, "extra": e}) for e in (extras or {""}))


def check(wheel_dir: Path, header: ListHeader, root: str) -> tuple[list[str], list[str], list[Wheel]]:
    """(problems, notes, wheels); problems make the wheelhouse unusable."""
    problems, notes = [], []
    wheels: dict[str, Wheel] = {}
    for path in sorted(wheel_dir.glob("*.whl")):
        w = read_wheel(path)
        if w.name in wheels:
            problems.append(f"two wheels of {w.name}: {wheels[w.name].path.name} and {path.name} "
                            "(pip --no-deps would install both and stop)")
        wheels[w.name] = w
        if any(fnmatch.fnmatch(w.name, canonicalize_name(p) if "*" not in p else p) for p in header.forbid):
            problems.append(f"{path.name} would replace a package of the host's torch (forbidden: {header.forbid})")
        if (why := tag_problem(w)) is not None:
            problems.append(f"{path.name}: {why}")
    root_req = Requirement(root)
    todo = deque([(root_req, "(root)")])
    seen: set[tuple[str, frozenset]] = set()
    omitted: dict[str, set[str]] = {}
    while todo:
        req, parent = todo.popleft()
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if name in wheels:
            w = wheels[name]
            w.needed_by.add(parent)
            if not req.specifier.contains(w.version, prereleases=True):
                clash = f"{parent} needs {req}, the wheelhouse has {w.name} {w.version}"
                if name in header.accept:
                    notes.append(f"accepted: {clash}: {header.accept[name]}")
                else:
                    problems.append(clash)
            if key in seen:
                continue
            seen.add(key)
            todo.extend((r, w.name) for r in w.requires if applies(r, set(req.extras)))
        elif name in header.host:
            have = header.host[name]
            if have is not None and not req.specifier.contains(have, prereleases=True):
                notes.append(f"host clash: {parent} needs {req}, the checked host has {name} {have}")
        elif name in header.omit:
            omitted.setdefault(name, set()).add(parent)
        else:
            problems.append(f"missing: {req} (needed by {parent}); add a pin to the list, or a '# host:' or "
                            "'# omit:' line saying why not")
    for name, parents in sorted(omitted.items()):
        notes.append(f"left out on purpose: {name} (needed by {', '.join(sorted(parents))}): {header.omit[name]}")
    unused = [w.path.name for w in wheels.values() if not w.needed_by]
    if unused:
        notes.append(f"not needed by {root}: {', '.join(unused)}")
    return list(dict.fromkeys(problems)), list(dict.fromkeys(notes)), sorted(wheels.values(), key=lambda w: -w.mib)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel_dir", type=Path)
    ap.add_argument("--list", type=Path, required=True, help="the pin list whose header names host / forbid / omit")
    ap.add_argument("--root", default="lagrl[gpu,dev]", help="the requirement whose closure must be met")
    args = ap.parse_args()
    problems, notes, wheels = check(args.wheel_dir, read_header(args.list), args.root)
    for w in wheels:
        by = ", ".join(sorted(w.needed_by)) or "-"
        print(f"  {w.mib:8.2f} MiB  {w.path.name:<78} needed by {by[:80]}")
    total = sum(w.mib for w in wheels)
    glibc = glibc_needed(wheels)
    print(f"  {total:8.2f} MiB  in {len(wheels)} wheels; the host needs glibc >= {glibc[0]}.{glibc[1]}")
    for n in notes:
        print(f"note: {n}")
    for p in problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
