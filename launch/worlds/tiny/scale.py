"""`--tiny`: any preset scaled to the tiny CPU world: 16-token responses, a ~0.5M-parameter model, 2 cores.

Batches shrink to D_R 32 keeping D_R/D_T, N_reuse and the group size (the rollouts per prompt are
part of a recipe: Skywork's 16, Sky-T1's 4 and 8); budgets are the paper's / 1024 (16K -> 16
tokens), stages of 1/20th the steps, at most 40 steps, avg@4 on 256 held-out problems every 10.

lr 5e-4 / sqrt(N_SGD) (RLOO: 2e-4) with a 10-update warm-up. Without the warm-up Adam's first step
(m/sqrt(v) ~ sign(g)) moves every weight by the full lr and the tiny policy loses most of its
accuracy before RL can help; without the 1/sqrt(N_SGD) a 0.5M-parameter model taking 16
updates per step collapses (measured: reuse-4 at 5e-4 falls from 0.28 to 0.09 avg@4, at 1e-4
it climbs to 0.52). The paper keeps lr fixed across ablations: pass --learner.lr to do so.

RLOO (skyt1_rloo, 8 rollouts, no filtering), 60 steps, held-out avg@4 every 10: at 5e-4 it rose to
0.32 and fell back to 0.20-0.25, at 1e-3 it collapsed to 0.05, at 2e-4 it rose steadily 0.25 -> 0.37.
PRIME: the PRM gets lr 1e-4 and the policy 1e-5 (``TINY_PRM_LR``, ``TINY_PRIME_LR``, both measured), not
PRIME's 1:2. Trained offline on a fixed tiny policy's rollouts (4 per prompt, PRIME's filter), the PRM's
held-out pairwise accuracy over 30 batches stayed at 0.41-0.51 at lr 1e-3 and 3e-4 (each update flattens
what it saw, so rare wrong answers gain on the right ones) and at 0.58-0.68 at 3e-5 to 2e-4. In a run,
the policy follows the process rewards to exactly those rare wrong answers: at a policy lr of 5e-4
held-out avg@4 fell 0.275 -> 0.081 in 10 steps, at 5e-5 (PRIME's ratio) the PRM's held-out pairwise
accuracy fell below chance after ~8 steps (0.2-0.4) and avg@4 0.27 -> 0.21; at 1e-5 the PRM stays
ahead (pairwise 0.58-0.60 over 10 steps, two runs) while the policy barely moves.
"""

from __future__ import annotations

from launch.config import RunConfig
from launch.worlds.scaling import rescale, scale_batch, scale_stages

TINY_ROLLOUT_UNIT = 32         # D_R 64 -> 32 (and D_T scaled by the same factor)
TINY_LR = {"grpo": 5e-4, "rloo": 2e-4}   # policy lr by advantage estimator (measured, module docstring)
TINY_PRM_LR = 1e-4             # PRIME's PRM in the tiny world (measured, module docstring)
TINY_PRIME_LR = 1e-5           # the policy under PRIME in the tiny world (measured, module docstring)


def tiny_lr(estimator: str) -> float:
    """The policy lr of an advantage estimator in the tiny worlds; one not measured yet starts from GRPO's, so a
    new estimator runs in --tiny / --code at once (measure it and add its entry to TINY_LR)."""
    return TINY_LR.get(estimator, TINY_LR["grpo"])


def scale_to_tiny(cfg: RunConfig) -> RunConfig:
    batch = scale_batch(cfg.learner.batch, TINY_ROLLOUT_UNIT)
    learner = dict(lr=tiny_lr(cfg.learner.advantage.estimator) / batch.n_sgd ** 0.5, warmup_steps=10,
                   weight_decay=0.0, micro_batch_tokens=4096, checkpoint_every=5, block_ms=200)
    if cfg.learner.prime is not None:
        learner.update(lr=TINY_PRIME_LR / batch.n_sgd ** 0.5,
                       prime=cfg.learner.prime.model_dump() | {"prm_lr": TINY_PRM_LR})
    return rescale(cfg, "tiny", batch, stages=scale_stages(cfg.data.stages, 1024, 4, 20), max_steps=40,
                   learner=learner, actors=dict(max_model_len=128, dtype="float32"),
                   data=dict(eval_n=4, eval_every=10, eval_max_problems=256))
