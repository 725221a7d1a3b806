"""What the learner's integration tests share: a small config, the tiny policy in the test process,
synthetic groups with behaviour log-probs, and weight comparisons (test_learner, test_prime_learner; their
fixtures ``tiny_world`` and ``policy`` are the conftests')."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from buffer.messages import Group, Response
from learner.batching import collate, rows_from_groups
from learner.config import BatchConfig
from learner.logprobs import logprobs_and_entropy
from learner.trainer_config import LearnerConfig

GS = 4            # responses per group
# Large enough to see one update, small enough that Adam's first (sign-like) step stays in the
# first-order regime: at 1e-4 the tiny world built on an AVX-512 machine overshoots (the surrogate
# loss rose by 0.06 where the first-order change was -0.09); at 1e-5 they agree (-0.008 vs -0.009).
LR = 1e-5
# Adam moves an entry by ~lr * g / (|g| + eps) whatever |g| is: with the default eps 1e-8, entries whose
# gradient is at fp32 summation noise (~1e-8 here: micro-batch and rank order) take random steps of
# up to lr. An eps 100x that noise keeps the tests' comparisons about the gradient, not the noise.
ADAM_EPS = 1e-6
SERIAL = itertools.count()     # unique run and group ids across tests


def learner_cfg(**kw) -> LearnerConfig:
    """A small learner config; batch sizes (rollout_batch, mini_batch, n_reuse, shuffle) may be given flat."""
    batch = dict(rollout_batch=4, mini_batch=4) | {k: kw.pop(k) for k in list(kw) if k in BatchConfig.model_fields}
    base = dict(lr=LR, adam_eps=ADAM_EPS, weight_decay=0.0, grad_clip=1.0, zero_stage=0, num_ranks=1,
                micro_batch_tokens=48,
                checkpoint_every=0, block_ms=100, data_timeout_s=60.0)
    return LearnerConfig(**(base | kw), batch=BatchConfig(**batch))


def make_buffer(url: str, name: str):
    from buffer import RunBuffer
    return RunBuffer.from_url(url, f"lt-{name}-{next(SERIAL)}")


def make_learner(cfg, buf, tiny_world, run_dir, ranks):
    from actors.transport.object_store import RayObjectStoreTransport
    from learner.loop import Learner
    return Learner(cfg, buffer=buf, model_dir=tiny_world.model_dir, run_dir=run_dir, ranks=ranks,
                   transport=RayObjectStoreTransport(buf.run_id), temperature=1.0, group_size=GS)


def set_weights(model, state: dict[str, torch.Tensor]) -> None:
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}   # tied to the embeddings


def make_groups(model, n: int, version: int, seed: int, *, rewards=None) -> list[Group]:
    """n groups of GS random responses; behaviour log-probs from ``model`` at temperature 1."""
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    groups = []
    for i in range(n):
        rw = rewards if rewards is not None else rng.permutation([0.0, 1.0] + list(rng.integers(0, 2, GS - 2) * 1.0))
        tokens = [rng.integers(3, vocab, int(rng.integers(3, 11))).astype(np.int32) for _ in rw]
        responses = [Response(t, np.zeros(len(t), np.float32), "stop", version, version, float(r))
                     for t, r in zip(tokens, rw)]
        gid = f"s{seed}-g{i}-{next(SERIAL)}"
        groups.append(Group(gid, gid, "synthetic", 0, rng.integers(3, vocab, int(rng.integers(3, 7))).astype(np.int32),
                            "1", responses, "test-actor"))
    rows = rows_from_groups(groups, [np.zeros(GS)] * n, [np.ones(GS, bool)] * n)
    with torch.no_grad():
        mb = collate(rows, list(range(len(rows))))
        logp, _ = logprobs_and_entropy(model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits,
                                       mb.targets)                                         # (B, L)
    k = 0
    for g in groups:
        for r in g.responses:
            r.logprobs = logp[k][mb.loss_mask[k]].numpy().astype(np.float32)
            k += 1
    return groups


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def update_error(w: dict, ref: dict, init: dict) -> float:
    """||w - ref|| / ||ref - init|| over all parameters: relative error of an update."""
    num = sum(float((w[k] - ref[k]).square().sum()) for k in ref)
    den = sum(float((ref[k] - init[k]).square().sum()) for k in ref)
    return (num / den) ** 0.5
