"""The Sky-T1-7B recipe's RL stages (NovaSky, "Unlocking the Potential of Reinforcement Learning in
Improving Reasoning Models", 2025-02-13): SFT -> RL with PRIME -> SFT -> RL with RLOO.

    skyt1_prime   step 2: PRIME (Cui et al. 2025) on the step-1 SFT model: batch 256 prompts,
                  4 rollouts each, prompts dropped when all 4 rollouts are right or all wrong
                  (PRIME's accuracy band [0.2, 0.8]), implicit PRM initialised from the same SFT
                  weights, beta 0.05.
    skyt1_rloo    step 4: plain RLOO (Ahmadian et al. 2024) on the step-3 SFT model: batch 256,
                  8 rollouts, verifier reward only, no prompt filtering (groups whose rewards are
                  all equal stay in the batch with advantage 0).

The SFT stages are ``python -m launch.recipes.sft`` (blog: 3 epochs, lr 1e-5, batch 96); the four commands
chain through ``--data.model_dir`` (README "The Sky-T1 recipe", ``launch/recipes/skyt1/pipeline.py``).

Numbers the blog does not give come from the PRIME reference scripts that Sky-T1's RL code builds
on (PRIME-RL/PRIME ``training/examples/run_prime_main.sh``, the verl port's ``prime`` recipe):
policy lr 5e-7, PRM lr 1e-6 with grad clip 10, one policy update per rollout batch (PPO mini-batch
= batch, hence strict on-policy here), symmetric clip 0.2, no KL, no entropy bonus, sampling
temperature 1. The blog gives no response budget for these stages; the presets keep the Skywork
baseline's 16K (``launch.config.presets.baseline``), so ``--tiny`` scales both to the tiny world's 16 tokens.
"""

from __future__ import annotations

from typing import Callable

from actors.config import ActorConfig
from launch.config import DataConfig, RunConfig, StageConfig
from learner.config import AdvantageConfig, BatchConfig, NoEntropy, PrimeConfig
from learner.lag_policy import OnPolicy
from learner.trainer_config import LearnerConfig

BATCH = 256                 # prompts per RL step in both stages (blog)
PRIME_ROLLOUTS = 4          # step 2 (blog)
RLOO_ROLLOUTS = 8           # step 4 (blog)
POLICY_LR = 5e-7            # PRIME's scripts (actor optim lr)
PRM_LR = 1e-6               # PRIME's scripts (reward_model optim lr)
RESPONSE_BUDGET = 16384


def _stage(name: str, group_size: int, **learner) -> RunConfig:
    return RunConfig(
        preset=name, temperature=1.0, group_size=group_size,
        actors=ActorConfig(max_model_len=RESPONSE_BUDGET + 2048),
        learner=LearnerConfig(lag=OnPolicy(), batch=BatchConfig(rollout_batch=BATCH, mini_batch=BATCH),
                              lr=POLICY_LR, entropy=NoEntropy(), **learner),
        data=DataConfig(stages=[StageConfig(max_tokens=RESPONSE_BUDGET)]))


def skyt1_prime() -> RunConfig:
    """Sky-T1-7B step 2: PRIME, batch 256, 4 rollouts, all-right / all-wrong prompts filtered."""
    return _stage("skyt1_prime", PRIME_ROLLOUTS, prime=PrimeConfig(prm_lr=PRM_LR, filter_low=0.2, filter_high=0.8))


def skyt1_rloo() -> RunConfig:
    """Sky-T1-7B step 4: RLOO with the verifier reward only, batch 256, 8 rollouts, no filtering."""
    return _stage("skyt1_rloo", RLOO_ROLLOUTS, dynamic_sampling=False,
                  advantage=AdvantageConfig(estimator="rloo", reject_zero_advantage=False))


SKYT1_PRESETS: dict[str, Callable[[], RunConfig]] = {"skyt1_prime": skyt1_prime, "skyt1_rloo": skyt1_rloo}
