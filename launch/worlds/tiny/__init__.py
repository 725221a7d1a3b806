"""The tiny world: "a+b" with a ``\\boxed{}`` answer, a 2-layer Qwen2, trained in minutes on 2 CPU cores.

    task.py       the problems (0 <= a, b < 50) and their 7-token solutions; splits by seed
    model.py      the 2-layer Qwen2 policy (its tokenizer: launch.worlds.tokenizer, VOCAB_SIZE in build.py)
    warmup.py     SFT on the solutions until sampled accuracy reaches its target (~10-50%)
    build.py      build / cache / manifest (``python -m launch.worlds tiny``)
    scale.py      ``--tiny``: any preset scaled to this world
"""
