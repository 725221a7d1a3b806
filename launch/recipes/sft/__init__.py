"""The SFT stage of a recipe (Sky-T1: SFT -> RL -> SFT -> RL): ``python -m launch.recipes.sft --help``.

    __main__.py   the command: JSONL prompt/response pairs -> a Hugging Face model directory
    config.py     its options (SftConfig) and their parsing
    train.py      the work: tokenised rows -> DeepSpeed updates (learner.deepspeed_kit) -> the HF directory
"""
