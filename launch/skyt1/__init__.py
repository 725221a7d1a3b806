"""The Sky-T1-7B recipe (NovaSky 2025): SFT -> RL (PRIME) -> SFT -> RL (RLOO), ``python -m launch.skyt1``.

    presets.py    its two RL stages as presets (skyt1_prime, skyt1_rloo; registered in launch.presets)
    pipeline.py   the four stages as one resumable command (the SFT stages are launch.sft)
"""
