"""launch.worlds.warmup_loop: the worlds' warm-up trains until the first check that passes (or its step budget),
checking on its schedule; a batch is teacher-forced, its labels on the response only."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from launch.worlds.warmup_loop import teacher_forced_batch, train_until_check


class Quadratic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(3.0))

    def forward(self, x):
        return SimpleNamespace(loss=(self.w * x).pow(2).mean())


def test_it_stops_at_the_first_check_that_passes():
    model, checked = Quadratic(), []

    def check(step: int, loss: float) -> bool:
        checked.append(step)
        return step >= 30

    steps = train_until_check(model, lambda _: {"x": torch.ones(4)}, check, seed=0, lr=0.1, max_steps=100,
                              check_every=10, first_check=5)
    assert steps == 35 and checked == [5, 15, 25, 35]
    assert not model.training and abs(model.w.item()) < 3.0            # trained, left in eval mode


def test_a_check_that_never_passes_runs_the_budget_and_checks_its_last_step():
    checked = []
    steps = train_until_check(Quadratic(), lambda _: {"x": torch.ones(4)}, lambda s, _: checked.append(s) or False,
                              seed=0, lr=0.1, max_steps=12, check_every=5)
    assert steps == 12 and checked == [5, 10, 12]


def test_a_batch_is_right_padded_with_labels_on_the_response():
    batch = teacher_forced_batch(SimpleNamespace(pad_token_id=0), [([1, 2], [3]), ([5], [6, 7, 8])])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0], [5, 6, 7, 8]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert batch["labels"].tolist() == [[-100, -100, 3, -100], [-100, 6, 7, 8]]
