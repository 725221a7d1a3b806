"""Build (or find in the cache) a world and print its manifest.

    python -m launch.worlds tiny                 # or reasoning, shapes: any name of launch.worlds.WORLDS
    python -m launch.worlds reasoning --seed 1 --cache-dir /tmp/worlds
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from launch.worlds import WORLDS, entry, load


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("world", choices=list(WORLDS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=None, help="default: $LAGRL_CACHE, else <repo>/.cache")
    args = ap.parse_args(argv)
    world = load(entry(args.world).build)(args.seed, args.cache_dir)
    print(json.dumps({"root": str(world.root), **world.manifest}, indent=2))


if __name__ == "__main__":
    main()
