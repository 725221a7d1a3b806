"""The docs name only what exists: README.md, docs/*.md and .ci/* checked against this checkout.

    .venv/bin/python -m pytest -q tests/unit/test_docs_paths.py

Each check is a small function that returns its problems as ``file:line: what`` strings (empty: none):

- ``broken_links``: a relative markdown link whose file (or ``#anchor``, a heading of that file) is missing;
- ``missing_paths``: a path in backticks or a code block under one of the project's top-level folders that
  is not in the checkout (placeholders ``<x>``, ``*``, ``{a,b}``, ``...`` are skipped; ``path:line`` and
  ``path::test`` suffixes stripped; ``runs/`` is never checked);
- ``unknown_modules``: ``python -m X`` where X cannot be found;
- ``old_module_names``: a module named by its pre-layering path (``launch.old_paths.MOVED``), which still
  runs for one release but is not what the docs should teach;
- ``bad_flags``: an option of a command line that its program does not have: the entry scripts' options are
  ``launch.run.compose.build_config``'s and every ``--section.field`` path of ``RunConfig``; another
  module's or script's must appear in its source.

``test_each_checker_catches_a_broken_line`` feeds every checker a broken line, so none passes vacuously.
Nothing here starts a server or imports torch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
import types
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
# the project's top-level folders; tools/ is gone (launch/ops/, .ci/), so any path under it is stale
TOP_FOLDERS = ("launch", "bench", "actors", "buffer", "rewards", "learner", "tests", "notebooks", "docs", ".ci",
               "tools")
ENTRY_SCRIPTS = ("launch/onpolicy.py", "launch/offpolicy_reuse4.py", "launch/ablate.py")
README_TEST_COMMAND = 'bash .ci/setup && .venv/bin/python -m pytest -m "not slow and not gpu" -q'
README_DEMO_COMMAND = "bash .ci/setup && .venv/bin/python launch/onpolicy.py --tiny"

_TOP = "|".join(re.escape(t) for t in TOP_FOLDERS)
PATH_RE = re.compile(r"(?<![\w.\-/$])((?:%s)/[^\s`'\"()\[\],;]*)" % _TOP)
# python / python3 / .venv/bin/python / torchrun / "$VPY" ... -m MODULE
MODULE_RE = re.compile(r"""(?:\bpython[\d.]*|\btorchrun|"?\$\{?[A-Za-z_]*[Pp][Yy][A-Za-z_]*\}?"?)"""
                       r"""\s+(?:-[A-Za-z]+\s+)*?-m\s+([A-Za-z_][\w.]*)""")
SCRIPT_RE = re.compile(r"(?<![\w.\-])((?:[\w.\-$]+/)*(?:%s)/[\w./\-]*\.py)\b" % _TOP)
DOTTED_LAUNCH_RE = re.compile(r"(?<![\w./])(launch(?:\.\w+)+)")
SEPARATOR_RE = re.compile(r"\s(?:&&|\|\||;|\|)\s")


@dataclass(frozen=True)
class Code:
    """A piece of code in a file: a code block (or a .ci file's line) or an inline code span."""

    where: str      # "file:line"
    text: str
    inline: bool


# ----------------------------------------------------------------------------------------------- reading


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def ci_files() -> list[Path]:
    return sorted(p for p in (ROOT / ".ci").iterdir() if p.is_file())


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_absolute() and ROOT in path.parents else str(path)


def split_markdown(text: str, name: str) -> tuple[list[Code], list[tuple[int, str]]]:
    """(code pieces, prose lines with their numbers); the prose keeps its inline code spans."""
    blocks, prose, lines = [], [], text.split("\n")
    fence, start, body, prev_blank = None, 0, [], True
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if fence is not None:
            if stripped.startswith(fence) and stripped.strip() == fence:
                blocks.append(Code(f"{name}:{start}", "\n".join(body), False))
                fence, body = None, []
            else:
                body.append(line)
        elif m := re.match(r"(`{3,}|~{3,})", stripped):
            fence, start, body = m.group(1), i + 1, []
        elif line.startswith("    ") and prev_blank and line.strip():       # an indented code block
            start, body = i + 1, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            blocks.append(Code(f"{name}:{start}", "\n".join(body), False))
            prev_blank = True
            continue
        else:
            prose.append((i + 1, line))
        prev_blank = not line.strip()
        i += 1
    return blocks, prose


def inline_code(prose: list[tuple[int, str]], name: str) -> list[Code]:
    """Every inline code span of the prose (a span may run over a line break)."""
    spans = []
    text = "\n".join(line for _, line in prose)
    numbers = [n for n, _ in prose]
    for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.S):
        line_index = text.count("\n", 0, m.start())
        spans.append(Code(f"{name}:{numbers[line_index]}", m.group(2).replace("\n", " ").strip(), True))
    return spans


def markdown_code(path: Path) -> list[Code]:
    blocks, prose = split_markdown(path.read_text(), _rel(path))
    return blocks + inline_code(prose, _rel(path))


def ci_code(path: Path) -> list[Code]:
    """A .ci file is code throughout: one piece per line (``$repo/`` stands for the checkout)."""
    return [Code(f"{_rel(path)}:{n}", line.replace("$repo/", ""), False)
            for n, line in enumerate(path.read_text().split("\n"), 1)]


def command_lines(code: Code) -> list[str]:
    """The shell commands of a piece of code: continuation lines joined, split at && || ; |."""
    text = code.text.replace("\\\n", " ")
    commands = []
    for line in text.split("\n"):
        commands += [part.strip() for part in SEPARATOR_RE.split(line) if part.strip()]
    return commands


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:      # an unbalanced quote (prose inside a block): plain words
        return command.split("#")[0].split()


# ----------------------------------------------------------------------------------------------- links


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    _, prose = split_markdown(path.read_text(), _rel(path))
    for _, line in prose:
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return frozenset(out)


def broken_links(path: Path, text: str | None = None) -> list[str]:
    """Relative links of a markdown file whose target file, or heading anchor, does not exist."""
    text = path.read_text() if text is None else text
    _, prose = split_markdown(text, _rel(path))
    problems = []
    for n, line in prose:
        line = re.sub(r"(`+).+?\1", "", line)        # a link inside inline code is not a link
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):        # http(s), mailto, ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                problems.append(f"{_rel(path)}:{n}: link to a missing file: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{_rel(path)}:{n}: link to a missing heading: {target}")
    return problems


# ----------------------------------------------------------------------------------------------- paths


def path_tokens(code: Code) -> list[str]:
    out = []
    for m in PATH_RE.finditer(code.text):
        token = m.group(1)
        if any(mark in token for mark in ("<", "*", "{", "...", "…", "$")):
            continue
        token = token.split("::")[0]
        token = re.sub(r":\d*$", "", token)          # path:line, or a path that ends a sentence's clause
        token = token.rstrip(".:")
        out.append(token)
    return out


def missing_paths(pieces: list[Code]) -> list[str]:
    return [f"{c.where}: no such path: {token}" for c in pieces for token in path_tokens(c)
            if not (ROOT / token).exists()]


# ----------------------------------------------------------------------------------------------- modules


def modules_named(code: Code) -> list[str]:
    return [m.group(1).rstrip(".") for m in MODULE_RE.finditer(code.text.replace("\\\n", " "))]


@cache
def find_module(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def unknown_modules(pieces: list[Code]) -> list[str]:
    return [f"{c.where}: python -m {name}: no such module" for c in pieces for name in modules_named(c)
            if find_module(name) is None]


def old_module_names(pieces: list[Code]) -> list[str]:
    """Modules named by an old path (they run for one release through launch.old_paths; docs teach the new)."""
    from launch.old_paths import new_name

    problems = []
    for c in pieces:
        for name in set(modules_named(c)) | set(DOTTED_LAUNCH_RE.findall(c.text)):
            name = name.rstrip(".")
            if new_name(name) is not None:
                problems.append(f"{c.where}: {name} is an old path: write {new_name(name)}")
    return problems


# ----------------------------------------------------------------------------------------------- flags


def _model_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every dotted field path of a pydantic model, through nested models, unions of models and Optional."""
    paths = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.add(path)
        for sub in _models_in(field.annotation):
            paths |= _model_paths(sub, path + ".")
    return paths


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []       # lists, dicts, literals and scalars are leaves: an override sets them whole


@cache
def run_config_paths() -> frozenset[str]:
    from launch.config import RunConfig

    return frozenset(_model_paths(RunConfig))


@cache
def entry_script_options() -> frozenset[str]:
    """The options of launch.run.compose.build_config's parser, read from its --help (before the epilog)."""
    from launch.run import compose

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        compose.build_config(["--help"], "onpolicy")
    options = out.getvalue().split(compose.HELP_EPILOG.splitlines()[0])[0]
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", options))


def run_flag_problem(flag: str, value: str | None) -> str | None:
    """Why ``flag`` (with its value) is not an option of the entry scripts, or None."""
    from launch.config.presets import PRESETS
    from launch.worlds import WORLDS

    if flag in entry_script_options():
        if flag == "--preset" and value and not value.isupper() and value not in PRESETS:
            return f"--preset {value}: no such preset"
        if flag == "--world" and value and not value.isupper() and value not in WORLDS:
            return f"--world {value}: no such world"
        return None
    key = flag[2:].replace("-", "_")
    if "<" in key or key in run_config_paths():
        return None
    return f"{flag}: neither an option of launch.run.compose.build_config nor a RunConfig field"


@cache
def source_of(target: str) -> str:
    """The source text of a module (a package: all its files) or of a script path."""
    if target.endswith(".py"):
        path = ROOT / target
        return path.read_text() if path.exists() else ""
    spec = find_module(target)
    if spec is None or spec.origin is None:
        return ""
    if spec.submodule_search_locations:
        return "\n".join(p.read_text() for loc in spec.submodule_search_locations for p in Path(loc).rglob("*.py"))
    return Path(spec.origin).read_text()


def source_flag_problem(target: str, flag: str) -> str | None:
    source = source_of(target)
    name = flag[2:].replace("-", "_")
    if f'"{flag}"' in source or f"'{flag}'" in source or flag == "--help":
        return None
    if re.search(rf"^\s+{re.escape(name)}\s*:", source, re.M):      # a field of a config parsed as --field value
        return None
    return f"{flag}: not an option of {target}"


def _flags_after(words: list[str]) -> list[tuple[str, str | None]]:
    """(flag, its value or None) for every --option among the words (``--a=b`` split)."""
    out = []
    for i, word in enumerate(words):
        if not word.startswith("--") or word == "--":
            continue
        if " " in word:         # a quoted argument that is itself a command line (--rl_args "--data.x 1")
            continue
        flag, eq, value = word.partition("=")
        if not eq:
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        out.append((flag, value))
    return out


def flag_problems_of_command(command: str) -> list[str]:
    """The options of one command line that its program lacks (entry scripts, project modules and scripts)."""
    problems = []
    m_module = MODULE_RE.search(command)
    m_script = SCRIPT_RE.search(command)
    if m_module and (not m_script or m_module.start() < m_script.start()):
        target, rest = m_module.group(1), command[m_module.end():]
        if target.split(".")[0] not in ("launch", "bench", "tests", "actors", "buffer", "rewards", "learner"):
            return []
    elif m_script:
        parts, rest = m_script.group(1).split("/"), command[m_script.end():]
        target = "/".join(parts[next(i for i, p in enumerate(parts) if p in TOP_FOLDERS):])     # $REPO/x -> x
    else:
        return []
    words = _words(rest)
    for flag, value in _flags_after(words):
        problem = (run_flag_problem(flag, value) if target in ENTRY_SCRIPTS
                   else source_flag_problem(target, flag))
        if problem:
            problems.append(problem)
    for word in words:          # --rl_args "--data.train_path x ...": a run's own command line
        if word.startswith("--") and " " in word:
            problems += [p for flag, value in _flags_after(_words(word)) if (p := run_flag_problem(flag, value))]
    return problems


def bad_flags(pieces: list[Code]) -> list[str]:
    """Options of command lines that do not exist; and any ``--section.field`` that is not a RunConfig path."""
    problems = []
    for c in pieces:
        for command in command_lines(c):
            problems += [f"{c.where}: {p}" for p in flag_problems_of_command(command)]
        text = c.text if c.inline else re.sub(r"(?m)(^|\s)#.*$", "", c.text)        # not in a shell comment
        for flag in re.findall(r"(?<![\w-])(--[a-z]\w*(?:\.[a-z]\w*)+)", text):         # dotted: a run override
            key = flag[2:]
            if key not in run_config_paths():
                problems.append(f"{c.where}: {flag}: no such RunConfig field")
        for key in re.findall(r"--override\s+([a-z]\w*(?:\.\w+)+)=", text):
            if key not in run_config_paths():
                problems.append(f"{c.where}: --override {key}: no such RunConfig field")
    return sorted(set(problems))


# ----------------------------------------------------------------------------------------------- the tests


def all_doc_code() -> list[Code]:
    return [c for path in doc_files() for c in markdown_code(path)]


def all_ci_code() -> list[Code]:
    return [c for path in ci_files() for c in ci_code(path)]


def test_the_docs_exist():
    assert (ROOT / "README.md").exists()
    assert len(doc_files()) > 5, "docs/*.md"


def test_relative_links_point_at_files_and_headings_that_exist():
    assert [p for path in doc_files() for p in broken_links(path)] == []


def test_paths_in_the_docs_exist():
    assert missing_paths(all_doc_code()) == []


def test_paths_in_ci_files_exist():
    assert missing_paths(all_ci_code()) == []


def test_python_m_modules_in_the_docs_exist():
    assert unknown_modules(all_doc_code()) == []


def test_python_m_modules_in_ci_files_exist():
    assert unknown_modules(all_ci_code()) == []


def test_the_docs_and_ci_use_the_new_module_paths():
    assert old_module_names(all_doc_code() + all_ci_code()) == []


def test_command_line_options_in_the_docs_exist():
    assert bad_flags(all_doc_code()) == []


def test_readme_keeps_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert README_DEMO_COMMAND in readme and README_TEST_COMMAND in readme
    assert README_TEST_COMMAND in (ROOT / ".ci" / "run").read_text()


def test_readme_is_short_and_lists_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme))
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= linked


def test_every_docs_page_opens_with_its_commands():
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        first_section = text.split("\n## ")[0]
        assert re.search(r"^```", first_section, re.M), f"{_rel(path)}: no fenced block of commands before its first ##"


BROKEN = [
    ("link", "[the cluster page](docs/no-such-page.md)"),
    ("link", "[a heading](README.md#no-such-heading)"),
    ("path", "see `launch/no_such_module.py` for it"),
    ("path", "```\nbash tools/gpu_wheelhouse.sh out\n```"),
    ("module", "```\npython -m launch.no_such_module --x 1\n```"),
    ("old", "```\npython -m launch.science --out runs/s\n```"),
    ("old", "the `launch.tools.compare` module"),
    ("flag", "```\npython launch/onpolicy.py --tiny --learner.no_such_field 1\n```"),
    ("flag", "```\n.venv/bin/python launch/ablate.py --preset no_such_preset --tiny\n```"),
    ("flag", "```\npython launch/onpolicy.py --tiny --no-such-option\n```"),
    ("flag", "set `--actors.no_such_knob 2` for that"),
    ("flag", "```\npython -m launch.experiments.science --no-such-flag --out runs/s\n```"),
    ("flag", "```\npython -m launch.recipes.sft --model_dir M --no_such_field 3\n```"),
    ("flag", "```\n.venv/bin/python bench/weight_sync.py --no-such-flag\n```"),
    ("flag", '```\npython -m launch.recipes.skyt1 --tiny --rl_args "--data.no_such 1"\n```'),
]
GOOD = [
    ("link", "[the results](bench/RESULTS.md) and [the tests](README.md#two-commands)"),
    ("path", "see `launch/config/presets.py:21`, `tests/unit/test_learner_loss.py::test_x`, `runs/<run_id>/`"),
    ("module", "```\npython -m launch.experiments.science --out runs/s\n```"),
    ("old", "```\npython -m launch.experiments.analysis.compare --out cmp/\n```"),
    ("flag", "```\nray job submit --address http://x:8265 -- python launch/onpolicy.py --tiny --steps 3 \\\n"
             "    --learner.entropy.coef 1e-3 --print-config --preset fixedlag_2 --run_dir r\n```"),
    ("flag", '```\npython -m launch.recipes.skyt1 --tiny --out runs/s --rl_args "--data.eval_n 8"\n```'),
]


def _check(kind: str, text: str) -> list[str]:
    path = ROOT / "README.md"
    pieces = markdown_code_of(text)
    return {"link": lambda: broken_links(path, text), "path": lambda: missing_paths(pieces),
            "module": lambda: unknown_modules(pieces), "old": lambda: old_module_names(pieces),
            "flag": lambda: bad_flags(pieces)}[kind]()


def markdown_code_of(text: str) -> list[Code]:
    blocks, prose = split_markdown(text, "sample")
    return blocks + inline_code(prose, "sample")


@pytest.mark.parametrize("kind,text", BROKEN, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BROKEN)])
def test_each_checker_catches_a_broken_line(kind, text):
    assert _check(kind, text), f"the {kind} check passed a broken line: {text!r}"


@pytest.mark.parametrize("kind,text", GOOD, ids=[f"{k}-{i}" for i, (k, _) in enumerate(GOOD)])
def test_each_checker_passes_a_good_line(kind, text):
    assert _check(kind, text) == []
