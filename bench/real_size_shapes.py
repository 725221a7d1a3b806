"""Real-size shapes on CPU: the full loop with Qwen2.5-0.5B's architecture (random weights, a
151,936-token vocabulary) and 512-token responses; peak memory per process, tokens/s, weight sync.

    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/real_size_shapes.py
    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/real_size_shapes.py --steps 2 --out shapes.json

One actor (vLLM, bf16), one learner rank (DeepSpeed ZeRO-0, fp32, activation checkpointing), a
local Ray and a private redis-server, 2 groups x 4 responses per step (``launch/worlds/shapes/scale.py``
says what changes from the preset and why; ``launch/worlds/shapes/measure.py`` how each figure is taken).
The first build of the world takes ~30 s and 1 GB in ``$LAGRL_CACHE``; a run of 3 steps on 2 cores
takes about 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--preset", default="onpolicy")
    ap.add_argument("--run_dir", default=None, help="parent of the run directory (default: a temp dir)")
    ap.add_argument("--out", default=None, help="also write the figures here (JSON)")
    args, extra = ap.parse_known_args()

    from launch.worlds.shapes.measure import measure, table

    run_dir = args.run_dir or tempfile.mkdtemp(prefix="lagrl-shapes-")
    figures = measure(["--steps", str(args.steps), "--run_dir", run_dir,
                       "--run_id", time.strftime("shapes-%Y%m%d-%H%M%S"), *extra], default_preset=args.preset)
    print(json.dumps(figures, indent=1))
    print(table(figures))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
