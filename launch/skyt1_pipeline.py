"""Old name of ``python -m launch.skyt1`` (the Sky-T1 pipeline, now ``launch/skyt1/pipeline.py``): kept for one
release so existing commands keep working; use ``python -m launch.skyt1``."""

from launch.skyt1.pipeline import main

if __name__ == "__main__":
    main()
