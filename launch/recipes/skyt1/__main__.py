"""``python -m launch.recipes.skyt1 ...``: the Sky-T1 pipeline (``launch.recipes.skyt1.pipeline``; ``--help`` for its options)."""

from launch.recipes.skyt1.pipeline import main

if __name__ == "__main__":
    main()
