"""No import cycle between the project's modules, the layering of DESIGN.md §1 module by module, and no
private name imported across modules.

The graph is read from the source with ast (nothing is imported): every import a module holds, at
module level, inside a function or under ``if TYPE_CHECKING:`` (such an import never runs, but a
cycle through it is still a cycle a reader has to untangle), with relative imports resolved and
``from pkg import name`` pointing at the submodule ``pkg.name`` when there is one (else at ``pkg``).

The layering, as the code keeps it (DESIGN.md §1 restated precisely; README "Layout" says the same):

    launch          -> every package; inside, by floors (LAUNCH_FLOORS, launch/__init__.py): config, worlds,
                       run, recipes, experiments | ops, the entry scripts; nothing imports up
                       (test_launch_imports_down_its_floors), no package-level cycle anywhere
    actors          -> buffer, rewards
    actors.cluster  -> nothing outside itself (how a run's Ray processes are placed, get the model, and
                       at what priority: shared by the actors and the learner ranks, no vLLM)
    learner         -> buffer, and from actors only ``actors.transport`` (the weight-transport interface:
                       no Ray or vLLM import, no concrete transport) and ``actors.cluster``
    buffer          -> none
    rewards         -> none
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Iterator

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "buffer", "learner", "rewards", "launch")
EVERYTHING = ("bench", "tests", *PACKAGES)      # where no private name may cross a module boundary

# importer (a package, or a subpackage with a rule of its own) -> what it may import outside itself: a
# package name allows the whole package, ``a.b.*`` the subpackage a.b, any other dotted name exactly that module
LAYERS: dict[str, tuple[str, ...]] = {
    "buffer": (), "rewards": (), "actors.cluster": (),
    "actors": ("buffer", "rewards"),
    "learner": ("buffer", "actors.transport", "actors.cluster.*"),
    "launch": PACKAGES,
}
# launch/ inside, bottom to top (launch/__init__.py draws it): a module imports launch modules only from
# lower floors, or from its own subpackage on its floor (experiments and ops, one floor, stay apart)
LAUNCH_FLOORS: tuple[tuple[str, ...], ...] = (
    ("launch.config",),
    ("launch.worlds",),
    ("launch.run",),
    ("launch.recipes",),
    ("launch.experiments", "launch.ops"),
    ("launch",),                  # the entry scripts, their command line, the old paths' aliases
)
# learner's pure math: functions over tensors and masks, no cluster, store or trainer engine
PURE_MATH = ("advantages", "loss", "entropy_control", "corrections", "guard_rules", "prime", "rloo", "lag",
             "reduce", "masked")
HEAVY = {"ray", "redis", "deepspeed"}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_nodes(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, wherever it stands (TYPE_CHECKING blocks included)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def _base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]     # relative: from this package up
    return ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names the module imports; ``from a import b`` gives ``a.b`` (a submodule, or a name in ``a``)."""
    for node in import_nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        else:
            base = _base(node, module, is_package)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a project module (``a.b.Thing`` -> ``a.b``)."""
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)


def _sources(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))
            if "__pycache__" not in p.parts}


def import_graph(root: Path, packages: Iterable[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the project modules it imports, module -> the top-level names of its other imports)."""
    paths = _sources(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in paths}
    outside: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in _imported_names(tree, module, path.name == "__init__.py"):
            target = _resolve(name, set(paths))
            if target is None:
                outside[module].add(name.split(".")[0])
            elif target != module:
                graph[module].add(target)
    return graph, outside


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (depth-first, in name order)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target in path:
                return path[path.index(target):] + [target]
            if target not in done and (cycle := visit(target)):
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done and (cycle := visit(module)):
            return cycle
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _layer(module: str, layers: Iterable[str]) -> str | None:
    """The most specific key of ``layers`` that ``module`` belongs to (``actors.cluster`` before ``actors``)."""
    return max((k for k in layers if _inside(module, k)), key=len, default=None)


def _allowed(target: str, allowed: Iterable[str]) -> bool:
    def one(a: str) -> bool:
        if a.endswith(".*"):
            return _inside(target, a[:-2])
        return target == a or ("." not in a and _inside(target, a))
    return any(one(a) for a in allowed)


def layering_violations(graph: dict[str, set[str]], layers: dict[str, tuple[str, ...]]) -> list[str]:
    """Every ``module -> target`` edge that leaves the importer's layer where ``layers`` does not allow it
    (a subpackage with a rule of its own, like ``actors.cluster``, is its own layer; the rest of its
    package may import it)."""
    out = []
    for m, targets in graph.items():
        layer = _layer(m, layers)
        if layer is None:
            continue
        out += [f"{m} -> {t}" for t in targets
                if not _inside(t, layer) and not _allowed(t, layers[layer])]
    return sorted(out)


def floor_violations(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every ``module -> target`` edge inside the floors that runs up, or sideways out of its subpackage."""
    where = {group: i for i, groups in enumerate(floors) for group in groups}

    def place(module: str) -> tuple[int, str] | None:
        group = _layer(module, where)
        return None if group is None else (where[group], group)

    out = []
    for m, targets in graph.items():
        if (mine := place(m)) is None:
            continue
        for t in targets:
            theirs = place(t)
            if theirs is not None and (theirs[0] > mine[0] or theirs[0] == mine[0] and theirs[1] != mine[1]):
                out.append(f"{m} -> {t}")
    return sorted(out)


def package_graph(graph: dict[str, set[str]], root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """The graph between packages: a module counts as the package (folder) it lives in."""
    paths = _sources(root, packages)

    def package(module: str) -> str:
        return module if paths[module].name == "__init__.py" else module.rsplit(".", 1)[0]

    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(package(m), set()).update(package(t) for t in targets if package(t) != package(m))
    return out


def private_imports(root: Path, packages: Iterable[str]) -> list[str]:
    """``module: from x import _y`` (or ``import x._y``) where ``_y`` belongs to another module."""
    paths = _sources(root, packages)
    found = []
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in import_nodes(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = _base(node, module, path.name == "__init__.py")
                names = [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                private = [p for p in name.split(".") if p.startswith("_") and not p.startswith("__")]
                if private and _resolve(name, set(paths)) != module:
                    found.append(f"{module}:{node.lineno}: {name}")
    return sorted(found)


def test_no_import_cycle_between_project_modules():
    graph, _ = import_graph(REPO, PACKAGES)
    assert len(graph) > 100 and "launch.run.summary" in graph["launch.run.driver"]   # function-level imports seen
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_check_finds_a_cycle(tmp_path: Path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "VALUE = 1\n",
        "a.py": "from pkg import b\n",                                   # b is a submodule
        "b.py": "def f():\n    from .c import helper\n",                 # relative, inside a function
        "c.py": "import pkg.a\nhelper = 1\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nfrom pkg import VALUE\n",
        "sub/__init__.py": "from .. import d\n",
    }
    for name, text in sources.items():
        (pkg / name).write_text(text)
    graph, outside = import_graph(tmp_path, ["pkg"])
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"},
                     "pkg.d": {"pkg", "pkg.a"}, "pkg.sub": {"pkg.d"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]

    (pkg / "c.py").write_text("import json\nhelper = 1\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import x\n")
    graph, outside = import_graph(tmp_path, ["pkg"])
    assert find_cycle(graph) == ["pkg.a", "pkg.d", "pkg.a"]                 # a cycle through TYPE_CHECKING
    assert outside["pkg.c"] == {"json"} and outside["pkg.d"] == {"typing"}


def test_modules_import_one_way():
    graph, _ = import_graph(REPO, PACKAGES)
    assert {"actors.cluster.placement", "actors.transport", "learner.rank_actor"} <= set(graph)
    assert "actors.transport" in graph["learner.loop"] and "actors.cluster.model_source" in graph["learner.rank_actor"]
    violations = layering_violations(graph, LAYERS)
    assert not violations, f"imports against the layering (module docstring): {violations}"


def test_the_layering_check_sees_modules_and_type_checking_imports(tmp_path: Path):
    for pkg in ("actors", "learner", "buffer"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "actors" / "transport.py").write_text("class Weights: ...\n")
    (tmp_path / "actors" / "engine.py").write_text("import buffer\n")
    (tmp_path / "learner" / "ok.py").write_text("from actors.transport import Weights\nimport buffer\n")
    (tmp_path / "learner" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from actors.engine import Engine\n")
    (tmp_path / "buffer" / "bad.py").write_text("def f():\n    from learner import ok\n")
    (tmp_path / "actors" / "shared").mkdir()                 # a subpackage with a rule of its own
    (tmp_path / "actors" / "shared" / "__init__.py").write_text("")
    (tmp_path / "actors" / "shared" / "place.py").write_text("from actors import engine\n")
    (tmp_path / "learner" / "also_ok.py").write_text("from actors.shared import place\n")
    (tmp_path / "actors" / "uses_shared.py").write_text("from actors.shared import place\n")
    graph, _ = import_graph(tmp_path, ["actors", "learner", "buffer"])
    layers = {"buffer": (), "actors": ("buffer",), "actors.shared": (),
              "learner": ("buffer", "actors.transport", "actors.shared.*")}
    assert layering_violations(graph, layers) == ["actors.shared.place -> actors.engine", "buffer.bad -> learner.ok",
                                                  "learner.bad -> actors.engine"]


def test_launch_imports_down_its_floors():
    graph, _ = import_graph(REPO, PACKAGES)
    assert {"launch.config.run", "launch.run.driver", "launch.experiments.science.runner", "launch.cli"} <= set(graph)
    violations = floor_violations(graph, LAUNCH_FLOORS)
    assert not violations, f"launch/ imports against its floors (launch/__init__.py): {violations}"


def test_the_floor_check_finds_an_upward_and_a_sideways_import(tmp_path: Path):
    for folder in ("launch", "launch/config", "launch/run", "launch/experiments", "launch/ops"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "launch" / "config" / "base.py").write_text("from launch.run import driver\n")       # up
    (tmp_path / "launch" / "run" / "driver.py").write_text("from launch.config import base\n")      # down: fine
    (tmp_path / "launch" / "experiments" / "tool.py").write_text("from launch.ops import smoke\nfrom launch.run import driver\n")
    (tmp_path / "launch" / "ops" / "smoke.py").write_text("def f():\n    from launch.experiments import tool\n")
    (tmp_path / "launch" / "cli.py").write_text("from launch.experiments import tool\n")          # the top: fine
    graph, _ = import_graph(tmp_path, ["launch"])
    floors = (("launch.config",), ("launch.run",), ("launch.experiments", "launch.ops"), ("launch",))
    assert floor_violations(graph, floors) == ["launch.config.base -> launch.run.driver",
                                               "launch.experiments.tool -> launch.ops.smoke",
                                               "launch.ops.smoke -> launch.experiments.tool"]


def test_the_project_and_the_benches_import_nothing_from_tests():
    """tests/ imports the project and bench/ (the benches' helpers, which tests share, live in bench/);
    nothing imports tests/ back."""
    graph, _ = import_graph(REPO, EVERYTHING)
    assert "bench.stub_members" in graph["tests.collective_members"] and "bench.weight_sync" in graph
    found = sorted(f"{m} -> {t}" for m, targets in graph.items() if not _inside(m, "tests")
                   for t in targets if _inside(t, "tests"))
    assert not found, f"imports of tests/ from outside it: {found}"


def test_no_cycle_between_packages():
    """Between folders too: a package importing a subpackage that imports it back is one knot to a reader
    (``actors`` <-> ``actors.transport`` was one: the transport's config now lives in the transport)."""
    graph, _ = import_graph(REPO, PACKAGES)
    packages = package_graph(graph, REPO, PACKAGES)
    assert {"launch.config", "actors.transport", "learner"} <= set(packages)
    cycle = find_cycle(packages)
    assert cycle is None, "package-level import cycle: " + " -> ".join(cycle or [])


def test_pure_math_imports_no_ray_redis_or_deepspeed():
    graph, outside = import_graph(REPO, PACKAGES)
    assert {f"learner.{m}" for m in PURE_MATH} <= set(graph)
    for module in (f"learner.{m}" for m in PURE_MATH):
        runs, todo = set(), [module]          # everything importing it runs: its imports and their packages
        while todo:
            m = todo.pop()
            if m in runs:
                continue
            runs.add(m)
            parents = [".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)]
            todo += [*graph[m], *(p for p in parents if p in graph)]
        heavy = sorted(f"{m} imports {name}" for m in runs for name in outside[m] & HEAVY)
        assert not heavy, f"{module}: {heavy}"


def test_no_private_name_is_imported_across_modules():
    found = private_imports(REPO, EVERYTHING)
    assert not found, f"a private name (_x) imported from another module; make it public or keep it home: {found}"


def test_the_private_name_check_finds_one(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_HIDDEN = 1\nfrom pkg.a import _HIDDEN as again\n")       # its own: fine
    (pkg / "b.py").write_text("def f():\n    from .a import _HIDDEN\nimport pkg._c\nfrom pkg.a import __doc__\n")
    (pkg / "_c.py").write_text("")
    assert private_imports(tmp_path, ["pkg"]) == ["pkg.b:2: pkg.a._HIDDEN", "pkg.b:3: pkg._c"]


def test_no_test_module_imports_another():
    """Shared test code lives in helper modules (tests/integration/harness.py, learner_setup.py, ...)."""
    graph, _ = import_graph(REPO, ["tests"])

    def is_test(module: str) -> bool:
        return module.rsplit(".", 1)[-1].startswith("test_")

    assert {"tests.integration.harness", "tests.unit.test_import_graph"} <= set(graph)
    crossing = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if is_test(m) and is_test(t))
    assert not crossing, crossing


def test_unit_test_files_are_named_after_the_package_they_test():
    """tests/unit/test_<package>_<module...>.py (this file and test_docs_paths.py, about every package, are the
    exceptions); a benchmark script's own logic: test_bench_<script>.py."""
    names = sorted(p.stem for p in (REPO / "tests" / "unit").glob("test_*.py"))
    prefixes = tuple(f"test_{p}_" for p in ("bench", *PACKAGES))
    stray = [n for n in names if n not in ("test_import_graph", "test_docs_paths") and not n.startswith(prefixes)]
    assert len(names) > 40 and not stray, f"rename after the package they test: {stray}"
