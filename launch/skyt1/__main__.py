"""``python -m launch.skyt1 ...``: the Sky-T1 pipeline (``launch.skyt1.pipeline``; ``--help`` for its options)."""

from launch.skyt1.pipeline import main

if __name__ == "__main__":
    main()
