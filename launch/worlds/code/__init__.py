"""The code world: the tiny world's sibling with code problems next to the arithmetic (DESIGN.md §9), so
a CPU run trains on math and code together through the sandbox and the Ray reward pool.

    task.py       the problems (a+b, and one-line Python functions / stdin programs), in the verl layout
    model.py      the 2-layer Qwen2 policy
    warmup.py     SFT on the gold answers until both kinds are sometimes right at τ=1
    build.py      build / cache / manifest (``python -m launch.worlds.code.build``)
    scale.py      ``--code``: any preset scaled to this world

Its tokenizer is launch.worlds.tokenizer's BPE (VOCAB_SIZE tokens) with CHAT_TEMPLATE: a system message
renders as ``# <content>``, a user message as ``Q: <content>``, the generation prompt as ``A: ``.

Its data is written in the verl layout (chat messages, ``reward_model.ground_truth``), so every run
on it also goes through ``rewards.verl_format`` and the chat-template rendering.
"""

RESPONSE_BUDGET = 32        # tokens: the longest gold answer is ~14 tokens
MAX_MODEL_LEN = 128
VOCAB_SIZE = 400
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}# {{ m['content'] }}\n"
                 "{% elif m['role'] == 'user' %}Q: {{ m['content'] }}\n{% else %}A: {{ m['content'] }}\n{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}A: {% endif %}")
