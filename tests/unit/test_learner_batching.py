"""Rows, micro-batch packing and rank assignment (no DeepSpeed, no Ray)."""

import numpy as np
import pytest

from buffer.messages import Group, Response
from learner.batching import (
    Row,
    assign_to_ranks,
    collate,
    plan_update,
    rows_from_groups,
    scatter_row_values,
    split_micro_batches,
)


def _row(p, r, adv=1.0, v=0, gi=0):
    return Row(np.arange(1, p + 1, dtype=np.int32), np.arange(10, 10 + r, dtype=np.int32),
               -np.arange(1, r + 1, dtype=np.float32), adv, v, v, gi)


def test_collate_aligns_response_tokens_with_logits():
    rows = [_row(3, 4, adv=0.5, v=2), _row(2, 2, adv=-1.0, v=3)]
    mb = collate(rows, [0, 1], pad_id=0)
    assert mb.input_ids.shape == (2, 6)                                    # max(3+4-1, 2+2-1)
    # row 0: sequence 1 2 3 | 10 11 12 13, the model reads 1 2 3 10 11 12; logits 2..5 predict 10..13
    assert mb.input_ids[0].tolist() == [1, 2, 3, 10, 11, 12]
    assert mb.targets[0].tolist() == [-100, -100, 10, 11, 12, 13]
    assert mb.loss_mask[0].tolist() == [False, False, True, True, True, True]
    assert mb.old_logprobs[0, 2:].tolist() == [-1, -2, -3, -4]
    assert mb.advantages[0].tolist() == [0, 0, 0.5, 0.5, 0.5, 0.5]
    assert mb.input_ids[1].tolist() == [1, 2, 10, 0, 0, 0] and mb.attention_mask[1].tolist() == [1, 1, 1, 0, 0, 0]
    assert mb.targets[1].tolist() == [-100, 10, 11, -100, -100, -100]
    assert mb.version_start.tolist() == [2, 3] and mb.num_loss_tokens == 6
    back = scatter_row_values(mb, mb.old_logprobs)
    assert back[0].tolist() == [-1, -2, -3, -4] and back[1].tolist() == [-1, -2]


def test_token_advantages_replace_the_broadcast_one():
    """PRIME's per-token advantages go to their positions; rows without them still broadcast A_i
    (GRPO/RLOO rows collate exactly as before)."""
    rows = [_row(3, 4, adv=0.5), _row(2, 2, adv=-1.0)]
    rows[0].token_advantages = np.array([0.1, -0.2, 0.3, -0.4], dtype=np.float32)
    mb = collate(rows, [0, 1])
    assert mb.advantages[0].tolist() == pytest.approx([0, 0, 0.1, -0.2, 0.3, -0.4])
    assert mb.advantages[1].tolist() == [0, -1.0, -1.0, 0, 0, 0]


def test_rows_carry_the_verifier_reward():
    g = Group("g", "g", "s", 0, np.array([1, 2], np.int32), "1", [
        Response(np.array([5, 6], np.int32), np.zeros(2, np.float32), "stop", 0, 0, 1.0),
        Response(np.array([7], np.int32), np.zeros(1, np.float32), "stop", 0, 0, 0.0)], "a")
    rows = rows_from_groups([g], [np.array([0.5, -0.5])], [np.array([True, True])])
    assert [r.reward for r in rows] == [1.0, 0.0] and all(r.token_advantages is None for r in rows)


def test_dummy_micro_batch_has_no_loss_tokens():
    mb = collate([], [])
    assert mb.input_ids.shape == (1, 1) and mb.num_loss_tokens == 0 and mb.row_index.tolist() == [-1]


def test_split_respects_budget_and_keeps_long_rows_whole():
    lengths = [10, 3, 7, 25, 4, 4]
    mbs = split_micro_batches(lengths, token_budget=16)
    assert sorted(i for mb in mbs for i in mb) == list(range(6))
    for mb in mbs:
        assert len(mb) * max(lengths[i] for i in mb) <= 16 or len(mb) == 1
    assert [3] in mbs                                                      # 25 > budget: alone


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_get_equal_micro_batch_counts(world):
    rows = [_row(2, n) for n in (9, 1, 5, 5, 2, 8, 3)]
    plan = plan_update(rows, list(range(len(rows))), token_budget=12, world=world)
    assert len(plan) == world and len({len(p) for p in plan}) == 1         # same count on every rank
    got = sorted(i for p in plan for mb in p for i in mb)
    assert got == list(range(len(rows)))                                   # every row exactly once


def test_assign_pads_with_empty_micro_batches():
    assert assign_to_ranks([[0]], [5], 2) == [[[0]], [[]]]


def test_rows_skip_masked_and_empty_responses():
    g = Group("g", "g", "s", 0, np.array([1, 2], np.int32), "1", [
        Response(np.array([5, 6], np.int32), np.array([-1, -1], np.float32), "stop", 0, 0, 1.0),
        Response(np.array([], np.int32), np.array([], np.float32), "stop", 0, 0, 0.0),
        Response(np.array([7], np.int32), np.array([-1], np.float32), "length", 0, 1, 0.0)], "a")
    rows = rows_from_groups([g], [np.array([1.0, 0.0, -1.0])], [np.array([True, True, False])])
    assert len(rows) == 1 and rows[0].response_ids.tolist() == [5, 6] and rows[0].advantage == 1.0
