"""The module paths launch/ had before it was layered (config, worlds, run, recipes, experiments, ops):
they keep working for one release, each with a one-line note of the new path.

    python -m launch.science ...        # runs launch.experiments.science, and says so once on stderr

:data:`MOVED` maps an old dotted prefix to the new one. :class:`OldPaths`, installed on ``sys.meta_path`` by
``launch/__init__.py``, answers an import of an old name with the module file at the new path, loaded
under the old name (an old import in a user's script gets a separate copy of that module). Remove this
module and its two lines in ``launch/__init__.py`` in the next release.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

MOVED = {
    "launch.presets": "launch.config.presets",
    "launch.overrides": "launch.config.overrides",
    "launch.layout": "launch.config.layout",
    "launch.run.redact": "launch.config.redact",
    "launch.skyt1.presets": "launch.config.skyt1_presets",
    "launch.sft": "launch.recipes.sft",
    "launch.skyt1": "launch.recipes.skyt1",
    "launch.science": "launch.experiments.science",
    "launch.analysis": "launch.experiments.analysis",
    "launch.tools.ablation": "launch.experiments.ablation",
    "launch.tools.filter_difficulty": "launch.experiments.filter_difficulty",
    "launch.tools.compare": "launch.experiments.analysis.compare",
    "launch.tools": "launch.experiments",
    "launch.smoke": "launch.ops.smoke",
    "launch.prepare": "launch.ops.prepare",
    "launch.install_check": "launch.config.install_check",
}


def new_name(old: str) -> str | None:
    """The current name of a module at an old path (the longest moved prefix wins), or None."""
    for prefix in sorted(MOVED, key=len, reverse=True):
        if old == prefix or old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix):]
    return None


class OldPaths(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.noted: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        spec = importlib.util.find_spec(new)
        if spec is None or spec.origin is None:
            return None
        top = fullname.split(".")[:2]
        if tuple(top) not in self.noted:
            self.noted.add(tuple(top))
            print(f"[lagrl] {fullname} moved to {new}; the old path works until the next release", file=sys.stderr)
        return importlib.util.spec_from_file_location(fullname, spec.origin,
                                                      submodule_search_locations=spec.submodule_search_locations)


def install() -> None:
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(OldPaths())     # last: the current paths are always found first
