"""The weights a generation actor's engine holds: loading what the transport has due, loading a pinned
version by number, and the version the engine now runs.

Loads happen between engine steps, on the actor's loop thread (or a control call), under the engine
lock: requests in flight continue on the new weights and record ``version_end > version_start``
instead of hiding the swap. A load that fails keeps the current weights and says why in the actor's
``last_error``; the next poll tries again.
"""

from __future__ import annotations

import threading
import time

from actors.bookkeeping import ActorStats
from actors.transport import WeightTransport, serves_older_versions


class EngineWeights:
    """``versions``: the buffer's version watch (``RunBuffer.watch_version``), the newest published
    (version, location) without a round trip."""

    def __init__(self, llm, transport: WeightTransport, versions, engine_lock: threading.RLock, stats: ActorStats):
        self.llm, self.transport, self.versions = llm, transport, versions
        self._engine_lock, self.stats = engine_lock, stats
        self.version = 0
        self.loaded_at = time.time()            # when the engine got self.version (trace "loaded")
        self._last_read = time.monotonic()

    def published(self, fresh: bool = False) -> tuple[int, str]:
        """(version, location) the learner published last: the watch's copy, re-read from Redis every
        second as well (the watch thread may be between reconnects after a Redis restart)."""
        now = time.monotonic()
        if fresh or now - self._last_read > 1.0:
            self._last_read = now
            return self.versions.refresh()
        return self.versions.latest()

    def sync(self, force: bool = False) -> int:
        """Load what the transport has due (the buffer's version when it is newer than the engine's;
        a collective send naming this actor); returns the version the engine holds."""
        published = self.published(fresh=force)
        try:
            with self._engine_lock:
                loaded = self.transport.poll(self.llm, self.version, published, force=force)
        except Exception as exc:
            # The published weights are gone: a learner killed with its job published them and
            # its restarted incarnation, resumed from an older checkpoint, is retraining up to
            # that version (it republishes it then). Or a collective receive lost a member; the
            # learner sends again. Keep the current weights and retry.
            self.stats.note(f"weights {published[1]} not loadable: {type(exc).__name__}: {exc}")
            time.sleep(0.5)
            return self.version
        self._loaded(loaded)
        return self.version

    def load(self, version: int) -> bool:
        """Load exactly ``version`` (older than the newest, for a pinned prompt); False when the
        transport does not have it (yet): a resumed learner republishes the versions pinned
        prompts need (``learner.lagged_weights``)."""
        if version == self.version:
            return True
        try:
            with self._engine_lock:
                self.transport.load_into(self.llm, self.transport.location_for(version))
        except Exception as exc:
            self.stats.note(f"pinned version {version} not loadable: {type(exc).__name__}: {exc}")
            time.sleep(0.5)
            return False
        self._loaded(version)
        return True

    def _loaded(self, version: int) -> None:
        if version != self.version:
            self.version = version
            self.loaded_at = time.time()
            self.stats.weight_loads += 1

    @property
    def serves_pins(self) -> bool:
        """The transport can load a version older than the newest (fixed lag)."""
        return serves_older_versions(self.transport)

    def kept(self) -> list[int]:
        """The versions the transport keeps ([] when it does not say)."""
        return self.transport.versions() if callable(getattr(self.transport, "versions", None)) else []

    def checksum(self) -> float:
        with self._engine_lock:
            return self.llm.collective_rpc("lagrl_weights_checksum")[0]

    def param_checksums(self) -> dict[str, float]:
        """Engine rank 0's float64 sum of each materialised parameter, by vLLM name."""
        with self._engine_lock:
            return self.llm.collective_rpc("lagrl_param_checksums")[0]
