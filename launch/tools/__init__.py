"""Offline tools that start runs or engines: the ablation series (presets in turn, then launch.analysis.compare) and
the difficulty filter (vLLM + the rewards over a dataset). ``compare.py``: the old name of launch.analysis.compare."""
