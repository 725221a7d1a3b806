"""Rewards (DESIGN.md §7): math (Skywork-OR1 + math-verify), code (subprocess sandbox), a Ray worker
pool, and avg@n / pass@k evaluation. Imports none of the other lagrl packages.

    from rewards import RewardConfig, RewardResult, ScoreRequest, score_group
    from rewards.workers import RewardPool           # Ray actors (imports ray)
    from rewards.problems import load_problems; from rewards.evaluate import evaluate_completions
"""

from rewards.config import RewardConfig
from rewards.result import RewardResult, ScoreRequest
from rewards.scoring import resolve_kind, score_group

__all__ = ["RewardConfig", "RewardResult", "ScoreRequest", "resolve_kind", "score_group"]
