"""Old name of ``python -m launch.analysis.compare`` (the comparison CLI moved to ``launch/analysis/compare.py``): kept for
one release so existing commands keep working; use ``python -m launch.analysis.compare``."""

from launch.analysis.compare import main

if __name__ == "__main__":
    main()
