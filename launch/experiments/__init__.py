"""Many runs and what they say:

    science/               the science report: do the papers' findings reproduce (python -m launch.experiments.science)
    analysis/              runs side by side: the comparison CLI, the notebook's panels, pass@k plots
    ablation.py            presets run one after another in this process (python -m launch.experiments.ablation)
    filter_difficulty.py   a dataset filtered by the policy's accuracy on it (python -m launch.experiments.filter_difficulty)
"""
