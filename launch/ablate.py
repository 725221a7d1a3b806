"""Any preset of DESIGN.md §5 by name (reuse quadruples, clip-higher, temperature, entropy, multi-stage).

    python launch/ablate.py --preset reuse2_dr64_dt32 --tiny
    python launch/ablate.py --help        # lists every preset
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # runnable as a file from anywhere

from launch.cli import main  # noqa: E402

if __name__ == "__main__":
    main(default_preset="baseline")
