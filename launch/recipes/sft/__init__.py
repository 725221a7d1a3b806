"""The SFT stage of a recipe (Sky-T1: SFT -> RL -> SFT -> RL): ``python -m launch.recipes.sft --help``.

    __main__.py   the command: JSONL prompt/response pairs -> a Hugging Face model directory
    config.py     its options (SftConfig) and their parsing
    train.py      the work: tokenised rows -> DeepSpeed updates (learner.deepspeed_kit) -> the HF directory

Not the CPU worlds' warm-up (``launch.worlds.warmup_loop``: in process, on a world's own batches, until a
sampled check passes); this stage trains a dataset for a number of epochs, on any number of ranks.
"""
