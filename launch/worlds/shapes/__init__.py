"""The shapes world: Qwen2.5-0.5B's shapes with random weights, to measure memory and time at real size.

    build.py      the model, a 151,936-token tokenizer and the tiny world's problems
                  (``python -m launch.worlds shapes``)
    scale.py      ``--shapes``: any preset at real-size shapes for a few measured steps

Measured by ``bench/real_size_shapes.py`` (peak memory per process, tokens/s, weight sync).
"""
