"""The science instrument: paired ablations on the CPU worlds, verdicts on the papers' findings, one report.

``python -m launch.experiments.science`` (see ``launch/experiments/science/__main__.py``); the findings in ``findings.py``,
the statistics and verdicts in ``verdict.py``, the runs in ``runner.py``, the HTML/CSV in ``report.py``.
"""
