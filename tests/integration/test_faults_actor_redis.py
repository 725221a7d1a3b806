"""Faults at run level (DESIGN.md §10): a generation actor SIGKILLed mid-run, redis-server SIGKILLed
and restarted mid-run, and a soak with an actor killed every few minutes.

Each test runs the tiny off-policy run (launch/offpolicy_reuse4.py, 2 actors) as a subprocess
against a redis-server this test owns (REDIS_URL), acts on it mid-run from here, waits for the run
to finish, then audits the books (buffer.audit) and prints them: no prompt or group lost, no group
consumed twice.

    flock /tmp/lagrl-heavy.lock .venv/bin/python -m pytest -s tests/integration/test_faults_actor_redis.py
    LAGRL_SOAK_MINUTES=30 flock /tmp/lagrl-heavy.lock .venv/bin/python -m pytest -s -m slow \\
        tests/integration/test_faults_actor_redis.py::test_soak_actor_kills_memory_bounded
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.harness import DriverRun, assert_books, text, trained_groups

pytestmark = pytest.mark.integration

# counters that only ever grow (the gauge groups_unconsumed may fall)
MONOTONE = ("prompts_issued", "prompts_deadlettered", "groups_written", "groups_consumed", "groups_deadlettered",
            "groups_duplicate_dropped", "groups_duplicate_skipped", "groups_trained", "groups_filtered",
            "groups_stale", "groups_already_trained", "groups_evaluated", "deadlettered")


def _marks(client, run_id: str) -> dict[str, int]:
    """What an acknowledged write can only increase: monotone counters, stream tips, the version."""
    from buffer import RunKeys
    from buffer.scripts import id_key

    keys = RunKeys(run_id)
    counters = {text(k): int(v) for k, v in client.hgetall(keys.counters).items()}
    out = {k: counters.get(k, 0) for k in MONOTONE}
    for name in ("prompts", "groups", "metrics", "versions"):
        key = getattr(keys, name)
        tip = client.xinfo_stream(key)["last-generated-id"] if client.exists(key) else "0-0"
        out[f"{name}_tip_ms"], out[f"{name}_tip_seq"] = id_key(tip)
    out["version"] = int(client.hget(keys.version, "version") or 0)
    out["consumed_ids"] = int(client.scard(keys.consumed))
    return out


def _went_backwards(before: dict, after: dict) -> dict[str, tuple[int, int]]:
    back = {}
    for name in ("prompts", "groups", "metrics", "versions"):
        b, a = (before[f"{name}_tip_ms"], before[f"{name}_tip_seq"]), (after[f"{name}_tip_ms"], after[f"{name}_tip_seq"])
        if a < b:
            back[f"{name}_tip"] = (b, a)
    back.update({k: (v, after[k]) for k, v in before.items() if "_tip_" not in k and after[k] < v})
    return back


class AofSizes:
    """Samples the AOF's size every 50 ms, to cut it back to what it was ``window_s`` ago: the
    writes an OS crash loses under ``appendfsync everysec`` (a killed process loses none of them:
    they are in the page cache)."""

    def __init__(self, aof: Path):
        self.aof, self.sizes, self._stop = aof, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.sizes.append((time.monotonic(), self.aof.stat().st_size if self.aof.exists() else 0))

    def cut_to(self, window_s: float) -> tuple[int, int]:
        """After the kill: truncate to the size ``window_s`` before now; returns (old, new) size."""
        self._stop.set()
        self._thread.join()
        now, full = time.monotonic(), self.aof.stat().st_size
        cut = max((s for t, s in self.sizes if t <= now - window_s), default=0)
        os.truncate(self.aof, cut)
        return full, cut


@pytest.fixture
def driver_runs():
    runs: list[DriverRun] = []
    yield runs
    for r in runs:
        r.close()


# ---------------------------------------------------------------------------------------------------
def test_actor_sigkill_mid_run_prompts_reclaimed_books_balance(tmp_path, own_redis, driver_runs, tiny_world):
    server = own_redis(tmp_path / "redis-run")
    run = DriverRun(tmp_path, server.url, "fault-actor", ["--steps", "8"])
    driver_runs.append(run)
    run.wait_for(lambda: run.steps_done() >= 2, "learner step 2", timeout_s=240)
    actor_id, pid, held = run.kill_busiest_actor()
    killed_at = time.monotonic()
    print(f"[fault] SIGKILL {actor_id} pid {pid} at step {run.steps_done()} holding {len(held)} prompts", flush=True)
    assert held, "the killed actor held no prompt: nothing to reclaim"

    # Ray restarts it (max_restarts): it beats again from a new process
    restarted = run.wait_for(lambda: (hb := run.live_actors().get(actor_id)) and hb["pid"] != pid and hb,
                             f"{actor_id} restarted by Ray", timeout_s=240)
    print(f"[fault] {actor_id} back as pid {restarted['pid']} after {time.monotonic() - killed_at:.0f}s", flush=True)
    # the driver's local Ray runs its workers at nice 0, a restarted one too (actors.cluster.priority)
    live = run.live_actors()
    assert {a: psutil.Process(int(hb["pid"])).nice() for a, hb in live.items()} == dict.fromkeys(live, 0)
    summary = run.finish()
    assert summary["steps"] == 8

    by = run.answered_by(held)
    print(f"[fault] the {len(held)} prompts it held were answered by {by}", flush=True)
    assert "unanswered" not in by, by
    a = run.audit("actor kill, end")
    assert_books(a)
    assert a.outcomes["trained"] == trained_groups(run.run_path), "a group was trained twice (or its ACK was lost)"
    print(f"[fault] wall {time.monotonic() - run.started:.0f}s", flush=True)
    server.stop()


@pytest.mark.parametrize("appendfsync,os_crash", [
    ("always", False),
    pytest.param("everysec", False, marks=pytest.mark.slow),     # ~100 s each: the default run keeps one
    pytest.param("everysec", True, marks=pytest.mark.slow)], ids=["always", "everysec", "everysec-os-crash"])
def test_redis_sigkill_restart_mid_run(tmp_path, own_redis, driver_runs, tiny_world, appendfsync, os_crash):
    """redis-server SIGKILLed mid-run, restarted 2 s later from its directory (same port, password,
    AOF): the run finishes and the books balance. ``os-crash`` also cuts the last second of the AOF,
    as an OS crash under everysec would: the server comes back behind its clients, and what it lost
    must be regenerated or re-delivered, never silently dropped."""
    server = own_redis(tmp_path / "redis-run", appendfsync=appendfsync)
    port, url = server.port, server.url
    sizes = AofSizes(server.data_dir / "appendonly.aof") if os_crash else None
    label = appendfsync + ("-os-crash" if os_crash else "")
    run = DriverRun(tmp_path, url, f"fault-redis-{label}", ["--steps", "8"])
    driver_runs.append(run)
    run.wait_for(lambda: run.steps_done() >= 3, "learner step 3", timeout_s=240)

    # Writes paused for the snapshot, so `before` is exactly what the server had acknowledged when killed.
    # A killed process keeps what it wrote to the page cache, so everysec normally loses nothing
    # here either (unless Redis had postponed an AOF write behind a slow fsync): only an OS crash
    # loses its window, which `os-crash` simulates.
    steps_at_kill = run.steps_done()
    run.client.client_pause(10_000, all=False)
    before_audit, before = run.audit("before kill"), _marks(run.client, run.run_id)
    old_pid = server.pid
    server.kill()
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
    if sizes:
        full, cut = sizes.cut_to(window_s=1.0)
        print(f"[fault] AOF cut from {full} to {cut} bytes: the last second of writes is gone", flush=True)
    time.sleep(2.0)
    server.start()                          # same directory: same port and password, AOF replayed
    own_redis.pids.append(server.pid)
    assert server.pid != old_pid and server.port == port and server.url == url
    after = _marks(run.client, run.run_id)
    back = _went_backwards(before, after)
    print(f"[fault] redis pid {old_pid} SIGKILLed, restarted as {server.pid} on port {port} "
          f"({label}); lost (before -> after the restart): {back or 'nothing'}", flush=True)

    summary = run.finish()
    assert summary["steps"] == 8, summary
    final = run.audit(f"redis restart ({label}), end")
    print(f"[fault] since the kill: prompts issued +{final.prompts_issued - before_audit.prompts_issued}, groups "
          f"written +{final.groups_written - before_audit.groups_written}, consumed "
          f"+{final.groups_consumed - before_audit.groups_consumed}, late duplicates dropped "
          f"+{final.groups_duplicate_dropped - before_audit.groups_duplicate_dropped}; step at kill {steps_at_kill}; "
          f"wall {time.monotonic() - run.started:.0f}s", flush=True)
    assert_books(final)
    slots = trained_groups(run.run_path)
    print(f"[fault] learner trained {slots} groups, {final.outcomes['trained']} effective trained ACKs", flush=True)
    if not os_crash:    # os-crash rolls the counters back too: trained ACKs counted before the cut are gone
        assert final.outcomes["trained"] == slots, "a group was trained twice (or its ACK was lost)"
    if appendfsync == "always":
        assert not back, f"acknowledged writes lost across the restart: {back}"
    server.stop()


# ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(0)   # no per-test limit: runs LAGRL_SOAK_MINUTES by design
def test_soak_actor_kills_memory_bounded(tmp_path, own_redis, driver_runs, tiny_world):
    """LAGRL_SOAK_MINUTES (default 30) of the tiny off-policy run, an actor SIGKILLed every
    LAGRL_SOAK_KILL_EVERY_S (default: a quarter of the run, at most 3 min, alternating actors).

    Redis memory stays bounded by the retention settings: after warm-up (the groups stream past its
    retention), the last third's max of used_memory <= 1.5 x the first third's. The one key that
    grows by design, the ``consumed`` set (the learner's idempotency set: one short id per consumed
    group, never trimmed), is taken out of that figure and checked separately: ids only, no payloads.
    The dead-letter and metrics streams are capped small here (their defaults keep 100k entries and
    1M rows: stale groups are dead-lettered with up to deadletter_raw_bytes of payload each).

    Also: every killed actor is replaced (Ray restarts it and it beats again with a new pid before the
    next kill), nothing is trained twice (the learner's own count of trained groups equals the
    buffer's), and the learner never stalls longer than LAGRL_SOAK_MAX_STALL_S (default 120 s)
    between two steps: a kill leaves the other actor generating and the dead one's prompts come
    back after reclaim_idle_ms (4 s here), so the learner must not wait for the restart (a cold
    vLLM start, 30-60 s on 2 cores); 120 s is twice that, room for a busy machine."""
    minutes = float(os.environ.get("LAGRL_SOAK_MINUTES", "30"))
    kill_every = float(os.environ.get("LAGRL_SOAK_KILL_EVERY_S", min(180.0, minutes * 60 / 4)))
    max_stall_s = float(os.environ.get("LAGRL_SOAK_MAX_STALL_S", "120"))
    retention = 128
    server = own_redis(tmp_path / "redis-run")
    run = DriverRun(tmp_path, server.url, "soak", [
        "--steps", "100000", "--max_wall_s", str(minutes * 60), "--actors.max_restarts", "1000",
        "--buffer.retention_groups", str(retention), "--buffer.retention_prompts", str(retention),
        "--buffer.trim_every", "16", "--buffer.metrics_maxlen", "100", "--buffer.deadletter_maxlen", "100"])
    driver_runs.append(run)
    run.wait_for(lambda: run.steps_done() >= 1, "learner step 1", timeout_s=300)

    samples: list[tuple[int, int, int]] = []    # (used_memory, consumed-set bytes, groups written)
    kills, next_kill, last = [], time.monotonic() + kill_every, None
    replaced: list[float] = []                   # seconds from each kill to a new live pid for that actor
    dead: tuple[str, int, float] | None = None   # (actor id, killed pid, when) until its replacement beats
    steps, last_step_at, longest_stall = run.steps_done(), time.monotonic(), 0.0
    while run.proc.poll() is None:
        now = time.monotonic()
        used = int(run.client.info("memory")["used_memory"])
        consumed = int(run.client.memory_usage(run.keys.consumed, samples=0) or 0)
        samples.append((used, consumed, int(run.client.hget(run.keys.counters, "groups_written") or 0)))
        if (n := run.steps_done()) > steps:
            steps, last_step_at = n, now
        longest_stall = max(longest_stall, now - last_step_at)
        live = run.live_actors()
        if dead and dead[0] in live and int(live[dead[0]]["pid"]) != dead[1]:
            replaced.append(round(now - dead[2], 1))
            print(f"[soak] {dead[0]} replaced after {replaced[-1]}s (pid {live[dead[0]]['pid']})", flush=True)
            dead = None
        if now >= next_kill and len(live) == 2 and dead is None:
            last, pid, held = run.kill_busiest_actor(exclude=last)
            dead = (last, int(pid), time.monotonic())
            kills.append((round(time.monotonic() - run.started), last, len(held)))
            print(f"[soak] t={kills[-1][0]}s SIGKILL {last} pid {pid} holding {len(held)} prompts", flush=True)
            next_kill = time.monotonic() + kill_every
        time.sleep(2.0)
    summary = run.finish(timeout_s=60)
    a = run.audit("soak, end")

    warm = [s for s in samples if s[2] >= 2 * retention] or samples[len(samples) // 3:]
    third = max(len(warm) // 3, 1)
    first, final = (max(u - c for u, c, _ in part) for part in (warm[:third], warm[-third:]))
    per_id = samples[-1][1] / max(a.groups_consumed, 1)
    mib = 2 ** 20
    print(f"[soak] {summary['steps']} steps in {summary['seconds']:.0f}s; {len(kills)} actor kills {kills}; "
          f"used_memory less the consumed set: max first third {first / mib:.2f} MiB, last third "
          f"{final / mib:.2f} MiB ({len(samples)} samples, {len(warm)} after warm-up); consumed set "
          f"{samples[-1][1] / mib:.2f} MiB = {per_id:.0f} B per consumed group; used_memory at the end "
          f"{samples[-1][0] / mib:.2f} MiB; high-water mark {max(u for u, _, _ in samples) / mib:.2f} MiB; "
          f"replacements after {replaced} s; longest learner stall {longest_stall:.0f}s", flush=True)
    assert kills, "no actor was killed: the soak was too short for LAGRL_SOAK_KILL_EVERY_S"
    assert summary["steps"] > 0
    assert_books(a)
    assert a.outcomes["trained"] == trained_groups(run.run_path), "a group was trained twice (or its ACK was lost)"
    assert len(replaced) >= len(kills) - (dead is not None), f"killed {kills}, replaced only {replaced}"
    assert longest_stall <= max_stall_s, f"the learner stalled {longest_stall:.0f}s > {max_stall_s:.0f}s"
    assert final <= 1.5 * first, f"Redis memory grew: {first} -> {final} bytes"
    assert per_id <= 160, f"consumed set holds {per_id:.0f} B per group: more than an id"
    server.stop()
