"""``deepspeed.init_distributed`` for lagrl's processes, without compiling an op at run time.

On CPU DeepSpeed's comm backend JIT-builds its shared-memory op (``deepspeed_shm_comm``, a C++
extension, 1-2 min on 2 cores) the first time any process initialises it. The op serves only
``inference_all_reduce`` (DeepSpeed-Inference tensor parallelism); training's collectives go
through torch.distributed (gloo on CPU) either way. torch's extension cache keys the build by its
command line, so two kinds of processes (a Ray learner rank, a plain SFT process) rebuilt it in
turn, again and again during a test run. Marking the op incompatible in DeepSpeed's own record of
compatible ops (``deepspeed.ops.__compatible_ops__``, a cached dict edited in place) makes the
backend skip it: nothing is compiled, and the gradients are the same.

On CUDA the backend asks for no such op (the CUDA accelerator has no shared-memory builder).
"""

from __future__ import annotations

SHM_COMM_OP = "deepspeed_shm_comm"


def skip_shm_comm_op() -> None:
    """Make DeepSpeed's CPU comm backend skip (never build) its shared-memory op in this process."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False


def init_distributed(device: str) -> None:
    """torch.distributed through DeepSpeed: NCCL on 'cuda', gloo on 'cpu' (env:// rendezvous:
    MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE must be set)."""
    import deepspeed

    if device != "cuda":
        skip_shm_comm_op()
    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo", auto_mpi_discovery=False,
                               verbose=False)
