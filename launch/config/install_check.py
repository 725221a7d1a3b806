"""The project's top-level package names are generic (``buffer``, ``launch``, ...): check that they are ours.

lagrl is installed editable into its own virtual environment (``.ci/setup``): the packages stay in
the checkout and an import finder maps their names to it. Another installed distribution that
ships a top-level package of the same name would silently win the import (site-packages is
searched before the editable finder), and a non-editable install of lagrl would overwrite it.
:func:`problems` finds both cases; ``.ci/setup`` and every entry script refuse to go on with a
message that says which distribution is in the way.

    python -m launch.config.install_check      # exit 1 and the problems, or "ok"
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "buffer", "launch", "learner", "rewards")
DISTRIBUTION = "lagrl"


def problems() -> list[str]:
    """What would make ``import <package>`` load something other than this checkout's package."""
    out = []
    owners = packages_distributions()
    for name in PACKAGES:
        others = sorted(set(owners.get(name, [])) - {DISTRIBUTION})
        if others:
            out.append(f"top-level package {name!r} is also provided by {', '.join(others)}: "
                       f"uninstall it or give lagrl its own virtual environment")
        spec = importlib.util.find_spec(name)
        where = Path(spec.origin).resolve().parent if spec and spec.origin else None
        if where != REPO_ROOT / name:
            out.append(f"import {name} resolves to {where}, not {REPO_ROOT / name}: install lagrl editable "
                       f"(pip install -e .) from this checkout")
    return out


def require_own_packages() -> None:
    """Exit with the problems (entry scripts call this before importing the heavy modules)."""
    found = problems()
    if found:
        sys.exit("lagrl: package names are shadowed:\n  " + "\n  ".join(found))


if __name__ == "__main__":
    require_own_packages()
    print(f"ok: {', '.join(PACKAGES)} resolve to {REPO_ROOT}")
