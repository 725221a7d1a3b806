"""Recipes of several stages, above a single run:

    sft/      supervised fine-tuning on demonstrations (python -m launch.recipes.sft)
    skyt1/    the Sky-T1 pipeline: SFT -> PRIME -> SFT -> RLOO (python -m launch.recipes.skyt1)
"""
