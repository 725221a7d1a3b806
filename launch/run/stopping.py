"""How a run stops: the signals that ask it to (StopSignal) and the shutdown of what it started, in
dependency order (shut_down)."""

from __future__ import annotations

import signal
from actors.transport.staging import sweep


class StopSignal:
    """SIGTERM (ray job stop) and SIGINT end the run cleanly between learner steps."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.requested:               # second signal: stop waiting for a clean shutdown
            raise KeyboardInterrupt
        self.requested = True
        print(f"\n[driver] signal {signum}: stopping after the current step (now, if it is still waiting "
              f"for data; a second signal stops at once)", flush=True)


def shut_down(feeder, actors, loops, learner, pool) -> None:
    """Stop in dependency order; each step is best-effort so one failure cannot leak the rest."""
    import ray

    steps = [
        ("feeder", lambda: feeder and feeder.stop()),
        ("actors", lambda: actors and stop_actors(actors, loops or [])),
        ("learner", lambda: learner and learner.close()),
        ("reward pool", lambda: pool and pool.shutdown()),
        ("actor kill", lambda: actors and [ray.kill(a) for a in actors]),
        ("staged weights", sweep_staged),     # this node's copies that killed actors left in memory
    ]
    for name, fn in steps:
        try:
            fn()
        except Exception as exc:
            print(f"[driver] shutdown of {name} failed: {type(exc).__name__}: {exc}", flush=True)


def sweep_staged() -> None:
    removed = sweep()
    if removed:
        print(f"[driver] removed {len(removed)} staged weight file(s) of dead actors: {removed}", flush=True)


def stop_actors(actors, loops) -> None:
    """Ask every actor to stop, then wait for the loops of those that answered. An actor that does not
    answer within 20 s (its node died and Ray cannot place it again) is left to the final kill."""
    import ray

    stops = [a.stop.remote() for a in actors]
    answered, _ = ray.wait(stops, num_returns=len(stops), timeout=20)
    draining = [loop for stop, loop in zip(stops, loops) if stop in answered]
    if draining:
        ray.wait(draining, num_returns=len(draining), timeout=120)
    if len(answered) < len(stops):
        print(f"[driver] {len(stops) - len(answered)} actor(s) did not answer stop (node gone?)", flush=True)
