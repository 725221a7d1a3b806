"""The collective transport in a generation actor: register, heartbeat, join the sends addressed to it.

Everything runs in the actor's loop thread between engine steps (``poll``), so no weight
swap ever races ``engine.step()`` and "alive" means "reaches a poll": the heartbeat is written
from here, not from a thread. While the engine receives, the loop is blocked in vLLM's calls and
each engine worker beats for itself (``vllm_engine``; the engine core may run in another process,
the hub is reached over TCP from wherever it runs). A poll that finds a send naming this incarnation:

    ready -> wait for the learner's decision -> (new generation: init_weight_transfer_engine)
          -> start_weight_update -> update_weights -> finish_weight_update -> done

If the receive fails after ``start_weight_update`` the engine holds a mix of two versions;
``consistent`` is False until a later send completes, and the actor samples nothing meanwhile.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable

from actors.transport.config import CollectiveConfig
from actors.transport import WeightTransferError
from actors.transport.hub import Hub


class CollectiveReceiver:
    def __init__(self, cfg: CollectiveConfig, host: str, port: int, actor_id: str, workers: int,
                 keepalive: Callable[[], None] | None = None):
        self.cfg, self.actor_id, self.workers = cfg, actor_id, workers
        self.inc = uuid.uuid4().hex[:12]          # this process's incarnation
        self.keepalive = keepalive or (lambda: None)
        self.hub = Hub.connect(host, port, cfg.collective_timeout_s)
        self.hub.register(actor_id, self.inc, workers)
        self.gen: int | None = None               # the generation the engine's channel belongs to
        self.seen = 0                              # last send seq handled
        self.consistent = True
        self.version: int | None = None           # last version loaded through the hub
        self._plans: dict[str, list] = {}
        self._last_beat = time.monotonic()
        self.stats: dict = {}

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_beat >= self.cfg.heartbeat_s:
            self._last_beat = now
            self.hub.beat(self.actor_id, self.inc)

    def poll(self, llm) -> int | None:
        """Join the current send if it names this incarnation; the version loaded, else None."""
        self.beat()
        send = self.hub.get_json("send")
        if send is None or send["seq"] <= self.seen:
            return None
        self.seen = send["seq"]
        me = next((m for m in send["members"] if m[0] == self.actor_id and m[1] == self.inc), None)
        if me is None:
            return None                            # not in this group: a catch-up will come
        return self._join(llm, send, rank_offset=me[2])

    def wait_for_send(self, timeout_s: float) -> bool:
        """Block until the learner announces a send after the last one handled (True), at most
        ``timeout_s``: the learner waits for this member's ``ready``, so an idle member that slept
        through the announcement would add its sleep to every version's handshake."""
        return self.hub.wait_for(lambda: self.hub.get_json("send", {"seq": 0})["seq"] > self.seen, timeout_s)

    def _join(self, llm, send: dict, rank_offset: int) -> int | None:
        seq, version, gen = send["seq"], send["version"], send["gen"]
        self.hub.store.set(f"s{seq}/ready/{self.actor_id}", "1")
        key = f"s{seq}/decision"
        t0 = time.monotonic()
        missing = self.hub.wait_keys([key], self.cfg.join_timeout_s + 5.0, tick=self._tick,
                                     give_up=lambda _: self.hub.get_json("send", {"seq": seq})["seq"] > seq)
        if missing:
            raise WeightTransferError(f"{self.actor_id}: version {version}, send {seq}: no decision within "
                                      f"{self.cfg.join_timeout_s + 5:.0f} s", ["learner rank 0"])
        if self.hub.store.get(key).decode() != "go":
            return None
        t_ready = time.monotonic() - t0
        started = False
        try:
            if self.gen != gen:
                self.gen = None
                llm.init_weight_transfer_engine({"init_info": {
                    "host": self.hub.host, "port": self.hub.port, "gen": gen, "rank_offset": rank_offset,
                    "world_size": send["world"], "backend": send["backend"], "timeout_s": send["timeout_s"],
                    "actor": self.actor_id, "inc": self.inc, "seq": seq}})
                self.gen = gen
            plan = self._plan(send["plan"])
            t1 = time.monotonic()
            llm.start_weight_update()
            started = True
            llm.update_weights({"update_info": {"seq": seq, "version": version, "gen": gen, "plan": plan}})
            llm.finish_weight_update()
        except Exception as exc:
            self.gen = None                        # the channel is unusable: the retry forms a new group
            if started:
                self.consistent = False
            self.beat(force=True)
            self.hub.set_json(f"s{seq}/failed/{self.actor_id}", f"{type(exc).__name__}: {str(exc)[:300]}")
            raise WeightTransferError(f"{self.actor_id}: receiving version {version} in group {gen} failed",
                                      detail=f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        self.consistent, self.version = True, version
        self.beat(force=True)                      # a long receive must not read as silence
        self.hub.store.set(f"s{seq}/done/{self.actor_id}", "1")
        self.stats = {"version": version, "gen": gen, "ready_s": t_ready, "load_s": time.monotonic() - t1}
        return version

    def _tick(self) -> None:
        self.beat()
        self.keepalive()

    def _plan(self, pid: str) -> list:
        if pid not in self._plans:
            self._plans[pid] = self.hub.get_json(f"plan/{pid}")
        return self._plans[pid]
