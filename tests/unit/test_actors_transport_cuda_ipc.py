"""The CUDA IPC weight transport's turns and its refusals, without a GPU (its GPU tests:
tests/integration/test_cuda_ipc_gpu.py, marked gpu)."""

from __future__ import annotations

import time

import pytest

from actors.config import ActorConfig
from actors.transport import WeightTransferError, transport_for
from actors.transport.cuda_ipc import BoardState, CudaIpcTransport

META = {"version": 3, "handle": "h", "plan": [], "offsets": [], "nbytes": 0}


def test_the_writer_waits_for_readers_and_readers_for_the_writer():
    board = BoardState()
    assert board.begin_read() is None                      # nothing published yet
    assert board.begin_write()
    assert board.begin_read() is None                      # a write in progress: no reader
    board.end_write(META)
    first, second = board.begin_read(), board.begin_read()
    assert first["version"] == 3 and first["token"] != second["token"]
    assert not board.begin_write()                         # two engines load: the buffer is theirs
    board.end_read(first["token"])
    assert not board.begin_write()
    board.end_read(second["token"])
    assert board.begin_write() and board.version() == 3


def test_a_reader_that_died_mid_load_frees_the_buffer_after_its_lease():
    board = BoardState(lease_s=0.05)
    board.end_write(META)
    assert board.begin_read() is not None                  # never ended: its process died
    assert not board.begin_write()
    time.sleep(0.06)
    assert board.begin_write()


def test_on_cpu_it_is_refused_with_the_fix():
    with pytest.raises(WeightTransferError, match="hands CUDA memory to the engines, and this learner is on cpu: "
                                                  "use --actors.weight_transport ray or collective"):
        CudaIpcTransport("r").bind_learner(0, "127.0.0.1", "cpu")
    assert isinstance(transport_for(ActorConfig(weight_transport="cuda_ipc"), "r"), CudaIpcTransport)
    with pytest.raises(ValueError, match="serves only the newest version.*use --actors.weight_transport ray"):
        transport_for(ActorConfig(weight_transport="cuda_ipc"), "r", keep_versions=2)
