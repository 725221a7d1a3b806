"""Supervised warm-up on sampled routes: teach the grammar, the lookups and the additions, then stop part-way.

Every step draws a batch of training problems and a fresh route for each (`task.sample_trace`), so
the model learns the spread of routes, not one trace per problem. Training stops at the first
sampled check whose accuracy at τ=1 reaches `target_accuracy` (or after `max_steps`), which keeps
the build deterministic for a seed: RL then starts from a policy that is right some of the time
(DESIGN.md §9: 20-50%) and still spread over its routes. The step loop is the worlds' shared one
(launch.worlds.warmup_loop).

Small batches (8 problems), lr 2e-3 decaying linearly to `lr_final` x 2e-3 at `max_steps` (after a
20-step warm-up), all measured on 2 cores: the step cost scales with the batch, and in
steps-to-accuracy a batch of 8 learned as fast as 16 or 32, so it gets there in a quarter of the
time of 32; at a constant 2e-3 the loss stalled at ~0.49 nats/token from step 900 on (sampled
accuracy 15-29% up to step 1500) where the decay reaches 0.43 and 39% at step 900; 3e-3 was
still at 10% after 1200 steps. A check samples the given validation problems (a prefix of the
validation split, so every k alike) once at τ=1; checks start at `first_check` (the model is
far from the target before) and run every `check_every` steps.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from launch.worlds.routes.sampling import sample_stats
from launch.worlds.routes.task import ROUTES_TEACHER, SumProblem, Teacher, sample_trace
from launch.worlds.warmup_loop import teacher_forced_batch, train_until_check


@dataclass
class WarmupResult:
    steps: int
    accuracy: float                  # accuracy at τ=1 on the check subset at the last check
    seconds: float
    loss: float                      # teacher-forced loss (nats/token) of the last checked step
    checks: list[dict] = field(default_factory=list)   # every sampled check: step and its figures


def encode_batch(tok: PreTrainedTokenizerFast, prompts: list[str], responses: list[str]) -> dict[str, torch.Tensor]:
    """Right-padded prompt+response+EOS with labels only on the response tokens (EOS included)."""
    return teacher_forced_batch(tok, [(tok(p)["input_ids"], tok(r)["input_ids"] + [tok.eos_token_id])
                                      for p, r in zip(prompts, responses)])


def warm_up(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast, train: list[SumProblem],
            check_set: list[SumProblem], *, seed: int, budgets: tuple[int, ...], target_accuracy: float | None,
            max_steps: int, teacher: Teacher = ROUTES_TEACHER, batch_size: int = 8, lr: float = 2e-3,
            lr_warmup: int = 20, lr_final: float = 0.1, first_check: int = 700, check_every: int = 50,
            log=print) -> WarmupResult:
    """Train until sampled accuracy at τ=1 on `check_set` reaches target_accuracy (or max_steps; with
    no target, max_steps: a slipping teacher's own accuracy sets how right the policy can get)."""
    rng = random.Random(seed)
    start, checks = time.monotonic(), []
    last = {"accuracy": 0.0, "loss": float("nan")}

    def next_batch(_: int) -> dict[str, torch.Tensor]:
        problems = rng.sample(train, batch_size)
        return encode_batch(tok, [p.prompt for p in problems], [sample_trace(p, rng, teacher) for p in problems])

    def check(step: int, loss: float) -> bool:
        stats = sample_stats(model, tok, check_set, seed=seed + step, temperature=1.0, budgets=budgets)
        last.update(accuracy=stats.accuracy, loss=loss)
        checks.append({"step": step, "loss": round(loss, 4), "accuracy": round(stats.accuracy, 4),
                       "entropy": round(stats.mean_entropy, 4), "mean_length": round(stats.mean_length, 1)})
        log(f"[{teacher.name}] warm-up step {step:4d}  loss {loss:.3f}  sampled acc@τ=1 {stats.accuracy:.3f}  "
            f"entropy {stats.mean_entropy:.3f}  mean len {stats.mean_length:.0f}  ({time.monotonic() - start:.0f}s)")
        return target_accuracy is not None and stats.accuracy >= target_accuracy

    step = train_until_check(model, next_batch, check, seed=seed, lr=lr, max_steps=max_steps, check_every=check_every,
                             first_check=first_check, betas=(0.9, 0.98),
                             lr_factor=lambda s: min(1.0, s / lr_warmup) * (1 - (1 - lr_final) * s / max_steps))
    return WarmupResult(steps=step, accuracy=last["accuracy"], seconds=round(time.monotonic() - start, 1),
                        loss=round(last["loss"], 4), checks=checks)
