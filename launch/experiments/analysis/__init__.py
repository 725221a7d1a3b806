"""Reading runs back and drawing them: what the notebook, the comparison CLI and the ablation tool show.

    plots.py           one panel per metric (entropy, reward, length, lag, clip, throughput, ...)
    compare.py         runs side by side: metrics.jsonl or the buffer -> compare.png + compare.csv
                       (``python -m launch.experiments.analysis.compare``)
    pass_at_k_plot.py  one pass@k curve per evaluated checkpoint
    entropy_mechanism.py  the learner's cov(log-prob, advantage) against the probe entropy's change
                          between evaluations (the science report's figure of the entropy mechanism)

It reads runs through ``buffer`` (the read-only monitor) and ``launch.run.summary`` (the reader of a
run's metrics files, the one the driver's summary uses); the ablation tool and the notebook draw with it.
"""
