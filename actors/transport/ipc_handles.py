"""CUDA IPC handles as text: a CUDA tensor shared with another process on its GPU (torch's own reduction,
pickled), and opened there. Used by the learner side (actors.transport.cuda_ipc) and the engine's
weight-transfer backend (actors.transport.vllm_engine)."""

from __future__ import annotations

import base64
import pickle


def handle_of(tensor) -> str:
    """A CUDA tensor's IPC handle as text (torch's own reduction, pickled): another process on its GPU
    rebuilds a tensor over the same memory with :func:`open_handle`."""
    from torch.multiprocessing.reductions import reduce_tensor

    return base64.b64encode(pickle.dumps(reduce_tensor(tensor))).decode("ascii")


def open_handle(handle: str, device_index: int):
    """The tensor behind ``handle``, in this process (which must not be the one that made it), on our
    index of the same GPU (each process numbers its visible GPUs from 0)."""
    rebuild, args = pickle.loads(base64.b64decode(handle))
    args = list(args)
    args[6] = device_index          # storage_device: torch's rebuild_cuda_tensor argument
    return rebuild(*args)
