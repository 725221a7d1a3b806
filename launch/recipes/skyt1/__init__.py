"""The Sky-T1-7B recipe (NovaSky 2025): SFT -> RL (PRIME) -> SFT -> RL (RLOO), ``python -m launch.recipes.skyt1``.

    (its two RL stages are presets: skyt1_prime, skyt1_rloo in launch/config/skyt1_presets.py)
    pipeline.py   the four stages as one resumable command (the SFT stages are launch.recipes.sft)
"""
