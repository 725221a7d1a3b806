"""Reading runs back and drawing them: what the notebook, the comparison CLI and the ablation tool show.

    plots.py           one panel per metric (entropy, reward, length, lag, clip, throughput, ...)
    compare.py         runs side by side: metrics.jsonl or the buffer -> compare.png + compare.csv
                       (``python -m analysis.compare``)
    pass_at_k_plot.py  one pass@k curve per evaluated checkpoint

Layering: analysis imports ``buffer`` (the read-only monitor) and nothing else of the project but
``launch.install_check``, which its command line runs first like every entry script.
"""
