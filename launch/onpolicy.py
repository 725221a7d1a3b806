"""Strict on-policy baseline (Skywork-OR1 §4): N_reuse 1, D_T = D_R, symmetric clip, lag 0 everywhere.

    python launch/onpolicy.py --tiny                                   # tiny CPU run, local Ray + Redis
    ray job submit --address http://127.0.0.1:8265 --working-dir . -- python launch/onpolicy.py --tiny
    python launch/onpolicy.py --data.model_dir /models/qwen --data.train_path math.jsonl --data.eval_path aime24.jsonl
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # runnable as a file from anywhere

from launch.cli import main  # noqa: E402

if __name__ == "__main__":
    main(default_preset="onpolicy")
