"""Reading runs back and drawing them: what the notebook, the comparison CLI and the ablation tool show.

    plots.py           one panel per metric (entropy, reward, length, lag, clip, throughput, ...)
    compare.py         runs side by side: metrics.jsonl or the buffer -> compare.png + compare.csv
                       (``python -m analysis.compare``)
    pass_at_k_plot.py  one pass@k curve per evaluated checkpoint

Layering: analysis imports ``buffer`` (the read-only monitor) and of ``launch`` only two modules that
import nothing of launch: ``launch.run.summary`` (the reader of a run's metrics files, the one the
driver's summary uses) and ``launch.install_check`` (run first by its command line, as by every entry
script); ``launch`` imports analysis (the ablation tool draws its comparison).
"""
