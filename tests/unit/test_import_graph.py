"""No import cycle between the project's modules, and the one-way package layering of DESIGN.md §1.

The graph is read from the source with ast (nothing is imported): every import a module can run,
at module level or inside a function, with relative imports resolved and ``from pkg import name``
pointing at the submodule ``pkg.name`` when there is one (else at ``pkg``). Imports under
``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Iterator

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "analysis", "buffer", "cluster", "learner", "rewards", "launch")

# DESIGN.md §1: launch -> everything; actors -> buffer, rewards; learner -> buffer (and the weight
# transport in actors); buffer and rewards import none of the other packages.
ALLOWED = {"buffer": set(), "rewards": set(), "cluster": set(), "actors": {"buffer", "rewards", "cluster"},
           "learner": {"buffer", "cluster", "actors"}}
# learner's pure math: functions over tensors and masks, no cluster, store or trainer engine
PURE_MATH = ("advantages", "loss", "entropy_control", "corrections", "guard_rules", "prime", "rloo", "lag",
             "reduce", "masked")
HEAVY = {"ray", "redis", "deepspeed"}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(nodes: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in nodes:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.orelse)          # the TYPE_CHECKING branch never runs
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            yield from _import_nodes(ast.iter_child_nodes(node))


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names the module imports; ``from a import b`` gives ``a.b`` (a submodule, or a name in ``a``)."""
    for node in _import_nodes(tree.body):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:                                     # relative: from this module's package up
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
        yield from (f"{base}.{alias.name}" for alias in node.names)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a project module (``a.b.Thing`` -> ``a.b``)."""
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)


def import_graph(root: Path, packages: Iterable[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the project modules it imports, module -> the top-level names of its other imports)."""
    paths = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
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


def _package(module: str) -> str:
    return module.split(".")[0]


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
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}, "pkg.d": {"pkg"},
                     "pkg.sub": {"pkg.d"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]

    (pkg / "c.py").write_text("import json\nhelper = 1\n")
    graph, outside = import_graph(tmp_path, ["pkg"])
    assert find_cycle(graph) is None and outside["pkg.c"] == {"json"} and outside["pkg.d"] == {"typing"}


def test_packages_import_one_way():
    graph, _ = import_graph(REPO, PACKAGES)
    for pkg, allowed in ALLOWED.items():
        crossing = sorted(f"{m} -> {t}" for m, targets in graph.items() if _package(m) == pkg
                          for t in targets if _package(t) not in {pkg, *allowed})
        assert not crossing, f"{pkg} may import only {sorted(allowed) or 'none of the others'}: {crossing}"


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
