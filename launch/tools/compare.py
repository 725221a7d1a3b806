"""Old name of ``python -m analysis.compare`` (the comparison CLI moved to ``analysis/compare.py``): kept for
one release so existing commands keep working; use ``python -m analysis.compare``."""

from analysis.compare import main

if __name__ == "__main__":
    main()
