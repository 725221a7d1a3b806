"""The CPU priority of a run's Ray workers (generation actors, reward workers, learner ranks).

Ray starts every worker process at nice 15 (its ``worker_niceness`` setting) so that the raylet and
the driver win any contest for a core. For lagrl the workers *are* the run: at nice 15 a vLLM engine
gets a CFS weight of 36 against 1024 for every normal-priority process on the node. On a 2-core
machine kept busy by two spinning processes (``tests/repeat.py --modes load``) an engine that starts
in 15 s idle had not started after 5 minutes, and an actor whose peer was killed wrote no group in
180 s; beside a second training run the soak's actors starved the same way. So the local Ray a run
starts gives its workers nice 0 (:data:`SYSTEM_CONFIG`), a node started with ``ray start`` needs
``RAY_worker_niceness=0`` in its environment (:data:`START_ENV`; the README's commands set it), and a
worker that finds itself niced says so once (:func:`warn_if_niced`) instead of running slowly in
silence.
"""

from __future__ import annotations

import os
import sys

WORKER_NICENESS = 0
SYSTEM_CONFIG = {"worker_niceness": WORKER_NICENESS}          # ray.init(_system_config=...) of a new cluster
START_ENV = {"RAY_worker_niceness": str(WORKER_NICENESS)}     # environment of `ray start`


def warn_if_niced(what: str) -> int:
    """This process's niceness; above :data:`WORKER_NICENESS` it prints one line naming the fix
    (a process cannot lower its own niceness without CAP_SYS_NICE, so the fix is the node's)."""
    nice = os.nice(0)
    if nice > WORKER_NICENESS:
        print(f"[lagrl] {what} (pid {os.getpid()}) runs at nice {nice}: any normal-priority process on this "
              f"node takes the CPU first (Ray's worker_niceness). Start the node's Ray with "
              f"RAY_worker_niceness={WORKER_NICENESS} in its environment.", file=sys.stderr, flush=True)
    return nice
