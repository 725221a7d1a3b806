"""The object-store weight transport (real local Ray): a version comes back exactly as published, every
dtype and shape a model may hold, as read-only views of the store's memory."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.integration


def test_a_version_round_trips_through_the_object_store_bit_for_bit(ray_local, run_id):
    from actors.transport.object_store import RayObjectStoreTransport

    published = [("w", torch.randn(3, 4)), ("half", torch.randn(5).to(torch.bfloat16)),
                 ("scalar", torch.tensor(2.5, dtype=torch.float64)),
                 ("ids", torch.arange(6, dtype=torch.int64).reshape(2, 3)), ("mask", torch.tensor([True, False])),
                 ("strided", torch.randn(4, 6)[:, ::2])]          # not contiguous in the learner
    transport = RayObjectStoreTransport(run_id)
    location = transport.publish(published, 7)
    fetched = RayObjectStoreTransport(run_id).fetch(location)       # as an actor's copy fetches it
    assert [name for name, _ in fetched] == [name for name, _ in published]
    for (name, want), (_, got) in zip(published, fetched):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), name
