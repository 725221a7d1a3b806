"""The code world: the tiny world's sibling with code problems next to the arithmetic (DESIGN.md §9), so
a CPU run trains on math and code together through the sandbox and the Ray reward pool.

    task.py       the problems (a+b, and one-line Python functions / stdin programs), in the verl layout
    tokenizer.py  a byte-level BPE trained on the task's text, with a small chat template
    model.py      the 2-layer Qwen2 policy
    warmup.py     SFT on the gold answers until both kinds are sometimes right at τ=1
    build.py      build / cache / manifest (``python -m launch.worlds.code.build``)
    preset.py     ``--code``: any preset scaled to this world

Its data is written in the verl layout (chat messages, ``reward_model.ground_truth``), so every run
on it also goes through ``rewards.verl_format`` and the chat-template rendering.
"""

RESPONSE_BUDGET = 32        # tokens: the longest gold answer is ~14 tokens
MAX_MODEL_LEN = 128
