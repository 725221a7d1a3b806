"""Off-policy ablation (N_reuse 4, D_R 64, D_T 16): 16 updates per step, clip-higher ε_high 0.28, bounded lag.

    python launch/offpolicy_reuse4.py --tiny
    ray job submit --address http://127.0.0.1:8265 --working-dir . -- python launch/offpolicy_reuse4.py --tiny
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # runnable as a file from anywhere

from launch.cli import main  # noqa: E402

if __name__ == "__main__":
    main(default_preset="offpolicy_reuse4")
