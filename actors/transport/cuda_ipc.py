"""Weights handed over on the GPU itself, where learner rank 0 and the engines share it (DESIGN.md §8).

Learner rank 0 keeps one staging buffer on its GPU, as large as a version (the object store's bucket
layout, ``actors.transport.shm``), reused by every version: it copies the version in (device to device)
and shares the buffer once as a CUDA IPC handle. An engine worker on the same GPU opens the handle
once and loads each version from views of the buffer (``vllm_engine.LagrlIpcEngine``): no byte crosses
host memory, and only the handle (a few hundred bytes) and the layout cross vLLM's IPC.

Turns: a small named Ray actor (:class:`IpcBoard`) says which version the buffer holds and who reads it.
The learner writes a version only once no engine is loading (each read is a lease, so a reader that died
mid-load frees the buffer after ``LEASE_S``); an engine loads only while no write is in progress, and
loads the version the buffer holds (the newest: this transport serves no older version).

Where: CUDA only, every engine on learner rank 0's GPU (the registry's entry: ``devices`` cuda, a
shared GPU needed); elsewhere it is refused before anything starts. Not measured yet: no GPU has been
lent since it was written (its tests: tests/integration/test_cuda_ipc_gpu.py, marked gpu).
"""

from __future__ import annotations

import time
from typing import Callable

import ray

from actors.transport import WeightSource, WeightTransferError, as_source, parse_location_version
from actors.transport.ipc_handles import handle_of

LEASE_S = 60.0          # a read longer than this is a dead reader's: the writer stops waiting for it
TURN_TIMEOUT_S = 300.0  # the longest the learner waits for readers (or an actor for the writer)


class BoardState:
    """Whose turn it is on the staging buffer, and what it holds (``publish``'s layout and handle); served
    by the named actor :data:`IpcBoard`."""

    def __init__(self, lease_s: float = LEASE_S):
        self.lease_s = lease_s
        self.meta: dict | None = None        # {"version", "handle", "plan", "offsets", "nbytes"}
        self.writing = False
        self.readers: dict[str, float] = {}  # token -> lease end (monotonic)
        self.count = 0

    def begin_write(self) -> bool:
        now = time.monotonic()
        self.readers = {t: end for t, end in self.readers.items() if end > now}
        if self.readers:
            return False
        self.writing = True
        return True

    def end_write(self, meta: dict) -> None:
        self.meta, self.writing = meta, False

    def begin_read(self) -> dict | None:
        if self.writing or self.meta is None:
            return None
        self.count += 1
        token = f"r{self.count}"
        self.readers[token] = time.monotonic() + self.lease_s
        return {**self.meta, "token": token}

    def end_read(self, token: str) -> None:
        self.readers.pop(token, None)

    def version(self) -> int | None:
        return None if self.meta is None else self.meta["version"]


IpcBoard = ray.remote(num_cpus=0)(BoardState)


class CudaIpcTransport:
    """``cuda_ipc://<run_id>/<version>`` locations backed by one staging buffer on learner rank 0's GPU."""

    scheme = "cuda_ipc"
    upkeep_s = None         # nothing to maintain: an actor reads the buffer when the board lets it
    pushes = False          # an actor loads a published version itself

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.board_name = f"lagrl-ipc-{run_id}"
        self._board = None
        self._staging = None      # rank 0: the uint8 buffer on the GPU, kept for the run
        self._layout: tuple | None = None
        self._consistent = True
        self.stats: dict = {}

    def __getstate__(self) -> dict:
        """A copy for another process (the ranks, every actor): the buffer, its handle and the board's handle
        stay with their process."""
        return {**self.__dict__, "_board": None, "_staging": None, "_layout": None}

    @property
    def consistent(self) -> bool:
        return self._consistent

    def _board_handle(self, create: bool):
        if self._board is None:
            self._board = (IpcBoard.options(name=self.board_name, get_if_exists=True, lifetime=None).remote()
                           if create else ray.get_actor(self.board_name))
        return self._board

    def _turn(self, call: Callable, what: str):
        """Retry ``call`` (a board method) until it answers truthily, at most TURN_TIMEOUT_S."""
        deadline, pause = time.monotonic() + TURN_TIMEOUT_S, 0.001
        while True:
            answer = ray.get(call.remote())
            if answer:
                return answer
            if time.monotonic() > deadline:
                raise WeightTransferError(f"cuda_ipc: no turn to {what} after {TURN_TIMEOUT_S:.0f} s")
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    # ---- learner side
    def bind_learner(self, rank: int, host: str, device: str) -> CudaIpcTransport:
        if device != "cuda":
            raise WeightTransferError(f"the cuda_ipc weight transport hands CUDA memory to the engines, and this "
                                      f"learner is on {device}: use --actors.weight_transport ray or collective")
        return self

    def publish(self, weights, version: int) -> str | None:
        """Every learner rank calls this (ZeRO-3 gathers are collectives); rank 0 copies the version into
        the staging buffer once no engine is reading it."""
        import torch

        from actors.transport.channel import bucket_nbytes, pack, plan_buckets, plan_to_json
        from actors.transport.shm import BUCKET_BYTES, bucket_offsets

        source: WeightSource = as_source(weights)
        if source.rank != 0 and not source.collective:
            return None
        plan = plan_buckets(source.metadata(), BUCKET_BYTES)
        offsets, nbytes = bucket_offsets(plan)
        board = self._board_handle(create=True) if source.rank == 0 else None
        t0 = time.monotonic()
        if board is not None:
            if self._staging is None or self._staging.numel() != nbytes:
                self._staging = torch.empty(nbytes, dtype=torch.uint8, device=torch.cuda.current_device())
                self._layout = (handle_of(self._staging), plan_to_json(plan), offsets, nbytes)
            self._turn(board.begin_write, "write")
        for bucket, offset, named in zip(plan, offsets, source.buckets(plan)):
            if board is not None:
                self._staging[offset:offset + bucket_nbytes(bucket)].copy_(pack(named))
        if board is None:
            return None
        torch.cuda.current_stream().synchronize()       # the copies are done before any engine reads
        handle, plan_json, offsets_json, size = self._layout
        ray.get(board.end_write.remote({"version": version, "handle": handle, "plan": plan_json,
                                        "offsets": offsets_json, "nbytes": size}))
        self.stats = {"version": version, "bytes": nbytes, "write_s": time.monotonic() - t0}
        return f"{self.scheme}://{self.run_id}/{version}"

    def staging_handle(self) -> str | None:
        """Rank 0, once it has published: the staging buffer's IPC handle (what an engine opens)."""
        return None if self._layout is None else self._layout[0]

    def after_announce(self, weights=None, catch_up: bool = False) -> None:
        return None

    def learner_status(self) -> None:
        return None

    # ---- actor side
    def llm_kwargs(self) -> dict:
        from actors.transport.vllm_engine import IPC_BACKEND, register

        register()                   # in this process too: an in-process engine's worker runs in it
        return {"weight_transfer_config": {"backend": IPC_BACKEND}}

    def attach(self, actor_id: str, llm, keepalive: Callable[[], None] | None = None) -> None:
        llm.init_weight_transfer_engine({"init_info": {}})

    def poll(self, llm, have: int, published: tuple[int, str], force: bool = False) -> int:
        """The buffer's version when the published one is newer than the engine's (or differs, with ``force``)."""
        version, location = published
        if location and (version > have or force and version != have):
            return self._load(llm)
        return have

    def wait_for_send(self, timeout_s: float) -> bool:
        return False                 # nothing is sent: ``poll`` loads the published version

    def load_into(self, llm, location: str) -> None:
        loaded = self._load(llm)
        if loaded < parse_location_version(location):
            raise WeightTransferError(f"cuda_ipc: the buffer holds version {loaded}, older than {location}")

    def _load(self, llm) -> int:
        """Load what the buffer holds, in a read turn; returns its version."""
        board = self._board_handle(create=False)
        meta = self._turn(board.begin_read, "read")
        t0, started = time.monotonic(), False
        try:
            llm.start_weight_update()
            started = True
            llm.update_weights({"update_info": {k: meta[k] for k in ("version", "handle", "plan", "offsets",
                                                                       "nbytes")}})
            llm.finish_weight_update()
        except BaseException:
            if started:
                self._consistent = False
            raise
        finally:
            ray.get(board.end_read.remote(meta["token"]))
        self._consistent = True
        self.stats = {"version": meta["version"], "bytes": meta["nbytes"], "load_s": time.monotonic() - t0}
        return meta["version"]
