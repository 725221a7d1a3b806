"""Beyond one machine, on one machine: tiny runs on a 3-node Ray cluster with an external Redis.

The cluster (tests/integration/cluster.py) is a head plus two worker nodes, each a real
``ray start`` with its own ports, its own private temp dir (standing for the node's local disk,
where lagrl caches models) and token auth; the head has no custom resources, so the driver's node
takes neither actors nor learner. Redis is a standalone redis-server (password, AOF) in a
directory of its own, passed as REDIS_URL. Checkpoints go to a directory that stands for shared
storage (``--learner.checkpoint_dir``). The model reaches the other nodes through Ray's object
store (``data.model_source`` auto = object_store on several nodes): each test checks that every
actor and learner rank opened its node's cache, not the driver's path.

1. placement: the tiny on-policy run and the tiny reuse-4 run, actors on the gen node, the
   learner on the train node, the driver on the head; books balanced; the monitor notebook and
   the audit work against the external Redis;
2. a generation node dies (its process group SIGKILLed, raylet and all) mid-run: the run finishes
   on the actor of the other node, its prompts reclaimed, the books balanced;
3. the learner's node dies mid-run; a new train node joins; the same command resumes from the
   shared checkpoint directory on the new node; nothing lost, no step trained twice.

    flock /tmp/lagrl-heavy.lock .venv/bin/python -m pytest -s -m slow tests/integration/test_cluster.py
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.integration.cluster import LocalCluster
from tests.integration.harness import (
    alive_redis,
    assert_books,
    audit_books,
    kill_pid,
    metrics_rows,
    png_count,
    run_notebook,
    start_driver,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECLAIM_MS = 4000


@pytest.fixture
def clusters(tmp_path):
    """Factory of local clusters; every node started here is stopped by process group at teardown."""
    started: list[LocalCluster] = []

    def start(workers: dict[str, dict[str, float]]) -> LocalCluster:
        t0 = time.monotonic()
        cluster = LocalCluster.start(tmp_path, workers)
        started.append(cluster)
        print(f"[test] cluster {sorted(cluster.nodes)} up in {time.monotonic() - t0:.0f}s", flush=True)
        return cluster

    yield start
    for c in started:
        c.stop()


@pytest.fixture
def external_redis(tmp_path):
    """A standalone redis-server (password, loopback, AOF) in a directory of its own."""
    from buffer.server import EmbeddedRedis

    server = EmbeddedRedis(tmp_path / "redis-host", stop_at_exit=False).start()
    pid = server.pid
    yield server
    server.stop(timeout_s=20)
    if alive_redis(pid):
        kill_pid(pid)


def _driver(script: str, cluster: LocalCluster, redis_url: str, tmp_path: Path, run_id: str, args: list[str],
            tag: str, cache: Path):
    return start_driver(script, tmp_path, run_id, ["--tiny", *args], log_name=f"driver-{tag}",
                        env={**cluster.env, "LAGRL_CACHE": str(cache)}, ray_address=cluster.gcs, redis_url=redis_url)


def _placed_args(shared: Path, actors: int = 2) -> list[str]:
    return ["--actors.num_actors", str(actors), "--actors.resources", '{"gen": 1}',
            "--learner.resources", '{"train": 1}', "--learner.checkpoint_dir", str(shared),
            "--buffer.reclaim_idle_ms", str(RECLAIM_MS), "--data.eval_n", "1", "--data.eval_max_problems", "4",
            "--data.eval_every", "0"]


def _books(url: str, run_id: str):
    books = audit_books(url, run_id, run_id)
    assert_books(books)
    return books


def _assert_placed(run_path: Path, cluster: LocalCluster, actor_nodes: set[str], learner_node: str,
                   tiny_model: Path) -> dict:
    """Where each process ran (placement.json, written by the driver) against the cluster's node
    ids, and that every actor and rank opened the model from its own node's cache."""
    placement = json.loads((run_path / "placement.json").read_text())
    ids = cluster.node_ids()
    name_of = {v: k for k, v in ids.items()}
    print(f"[test] placement: driver {name_of[placement['driver']['node_id']]}, actors "
          f"{ {a: name_of[p['node_id']] for a, p in placement['actors'].items()} }, learner "
          f"{[name_of[p['node_id']] for p in placement['learner']]}", flush=True)
    assert placement["driver"]["node_id"] == ids["head"]
    assert {name_of[p["node_id"]] for p in placement["actors"].values()} == actor_nodes
    assert [name_of[p["node_id"]] for p in placement["learner"]] == [learner_node]
    assert placement["model"]["model_source"] == "object_store" and placement["model"]["model_dir"] == str(tiny_model)
    digest = placement["model"]["model_digest"]
    for p in [*placement["actors"].values(), *placement["learner"]]:
        node = cluster.nodes[name_of[p["node_id"]]]
        assert p["model_dir"] == str(node.cache_dir / "models" / digest), p     # its node's local copy
        assert (Path(p["model_dir"]) / "model.safetensors").is_file()
    assert not (cluster.nodes["head"].cache_dir / "models").exists()   # the driver opened its own path
    return placement


# ----------------------------------------------------------------------------- 1. placement
def test_tiny_runs_on_three_nodes_actors_and_learner_placed_by_resources(clusters, external_redis, tiny_world,
                                                                         tmp_path, kernel_env):
    cluster = clusters({"gen-1": {"gen": 2}, "train-1": {"train": 1}})
    shared = tmp_path / "shared-storage" / "checkpoints"
    cache = tiny_world.root.parent
    for script, run_id, steps in (("onpolicy.py", "cluster-onpolicy", 6), ("offpolicy_reuse4.py", "cluster-reuse4", 4)):
        t0 = time.monotonic()
        run = _driver(script, cluster, external_redis.url, tmp_path, run_id,
                      ["--steps", str(steps), *_placed_args(shared)], run_id, cache)
        try:
            summary = run.finish(timeout_s=600)
        finally:
            run.close()
        print(f"[test] {run_id}: {summary['steps']} steps in {time.monotonic() - t0:.0f}s", flush=True)
        assert summary["steps"] == steps and summary["stop_reason"] == "completed"
        _assert_placed(run.run_path, cluster, {"gen-1"}, "train-1", tiny_world.model_dir)
        assert re.search(r"\[driver\] placement: driver on head .*lagrl-gen-\S+-0 on gen-1 .*learner rank 0 on train-1",
                         run.log()), run.log_tail()
        metrics = metrics_rows(run.run_path)
        if script == "onpolicy.py":
            assert all(m["lag/max"] == 0 and m["updates"] == 1 for m in metrics)
        else:
            assert all(m["updates"] == 16 for m in metrics) and max(m["lag/max"] for m in metrics) > 0
        # checkpoints on the shared storage, none in the driver's run directory; Redis external
        assert (shared / run_id / "checkpoints" / "latest").is_file() and not (run.run_path / "checkpoints").exists()
        assert (run.run_path / "redis_url.txt").is_file() and not (run.run_path / "redis").exists()
        _books(external_redis.url, run_id)

    # the notebook attaches to the finished run through redis_url.txt (the external server)
    nb, plotted = run_notebook(kernel_env, {"LAGRL_RUN_DIR": str(tmp_path / "runs" / "cluster-onpolicy")})
    assert plotted["run_id"] == "cluster-onpolicy" and plotted["rows"] >= 6 and png_count(nb) >= 4, plotted


# ----------------------------------------------------------------------------- 2. an actor's node dies
def test_killing_the_node_of_one_actor_the_run_finishes_on_the_other(clusters, external_redis, tiny_world, tmp_path):
    from buffer import RunKeys, connect
    from buffer.monitor import Monitor

    cluster = clusters({"gen-1": {"gen": 1}, "gen-2": {"gen": 1, "train": 1}})
    run_id, steps = "cluster-node-kill", 8
    client = connect(external_redis.url)
    run = _driver("offpolicy_reuse4.py", cluster, external_redis.url, tmp_path, run_id,
                  ["--steps", str(steps), *_placed_args(tmp_path / "shared")], "node-kill", tiny_world.root.parent)
    try:
        placement = run.wait_for(lambda: (run.run_path / "placement.json").exists()
                                 and json.loads((run.run_path / "placement.json").read_text()), "placement", 400)
        name_of = {v: k for k, v in cluster.node_ids().items()}
        on = {a: name_of[p["node_id"]] for a, p in placement["actors"].items()}
        assert sorted(on.values()) == ["gen-1", "gen-2"], on                 # one actor per gen node
        assert name_of[placement["learner"][0]["node_id"]] == "gen-2"
        doomed = next(a for a, n in on.items() if n == "gen-1")
        survivor = next(a for a, n in on.items() if n == "gen-2")

        def pending(actor: str) -> list:
            return client.xpending_range(RunKeys(run_id).prompts, "actors", "-", "+", 10_000, consumername=actor)

        def both_working():     # two steps done, both actors answered prompts, the doomed one holds some now
            beats = Monitor(client, run_id).actors()
            return (len(metrics_rows(run.run_path)) >= 2 and len(pending(doomed)) > 0
                    and all(beats.get(a, {}).get("prompts_done", 0) > 0 for a in (doomed, survivor)))
        run.wait_for(both_working, "two steps, groups from both actors, prompts held by the doomed one", 400)
        held = pending(doomed)
        step_at_kill, t_kill = len(metrics_rows(run.run_path)), time.monotonic()
        cluster.nodes["gen-1"].kill()
        beats = Monitor(client, run_id).actors()
        done_at_kill = {a: beats[a]["prompts_done"] for a in (doomed, survivor)}
        print(f"[test] killed node gen-1 ({doomed}) holding {len(held)} prompts after step {step_at_kill}; "
              f"prompts done {done_at_kill}", flush=True)
        summary = run.finish(timeout_s=600)
        print(f"[test] run finished {time.monotonic() - t_kill:.0f}s after the kill", flush=True)
    finally:
        run.close()
    assert summary["steps"] == steps and summary["stop_reason"] == "completed"
    assert step_at_kill < steps and held
    assert "gen-1" not in cluster.alive_node_names()[0]
    beats = Monitor(client, run_id).actors()
    print(f"[test] prompts done at the end {({a: beats[a]['prompts_done'] for a in beats})}", flush=True)
    assert beats[survivor]["prompts_done"] > done_at_kill[survivor]          # the run went on with the other actor
    assert beats[doomed]["prompts_done"] <= done_at_kill[doomed] + 2         # (a beat in flight at the kill)
    assert beats[doomed]["age_s"] > beats[survivor]["age_s"]
    _books(external_redis.url, run_id)
    client.close()


# ----------------------------------------------------------------------------- 3. the learner's node dies
def test_learner_node_lost_resumes_on_a_new_node_from_shared_checkpoints(clusters, external_redis, tiny_world,
                                                                         tmp_path):
    from learner import checkpoint as ckpt_io

    cluster = clusters({"gen-1": {"gen": 1}, "train-1": {"train": 1}})
    shared = tmp_path / "shared-storage"
    run_id, steps, every = "cluster-learner-move", 6, 2
    args = ["--steps", str(steps), "--learner.checkpoint_every", str(every), *_placed_args(shared, actors=1)]
    home = shared / run_id                  # learner.checkpoint_dir/<run_id>/checkpoints/
    first = _driver("onpolicy.py", cluster, external_redis.url, tmp_path, run_id, args, "first", tiny_world.root.parent)
    try:
        first.wait_for(lambda: any(m["step"] == every for m in metrics_rows(first.run_path)), f"step {every}", 400)
        assert ckpt_io.latest_checkpoint(home) is not None
        _assert_placed(first.run_path, cluster, {"gen-1"}, "train-1", tiny_world.model_dir)
        cluster.nodes["train-1"].kill()
        rc = first.proc.wait(300)          # the learner's ranks are gone: the driver fails and exits
        print(f"[test] driver exited {rc} after the learner's node died", flush=True)
        assert rc != 0
    finally:
        first.close()
    latest = ckpt_io.latest_checkpoint(home)
    state = ckpt_io.read_learner_state(latest)
    assert state.step >= every and not (first.run_path / "checkpoints").exists()
    before = metrics_rows(first.run_path)

    cluster.add_node("train-2", {"train": 1})
    second = _driver("onpolicy.py", cluster, external_redis.url, tmp_path, run_id, args, "second",
                     tiny_world.root.parent)
    try:
        summary = second.finish(timeout_s=600)
    finally:
        second.close()
    resumed = re.search(r"resumed from (\S+) at step (\d+), version (\d+)", second.log())
    assert resumed, second.log_tail()
    assert Path(resumed.group(1)) == latest
    assert (int(resumed.group(2)), int(resumed.group(3))) == (state.step, state.version)
    placement = _assert_placed(second.run_path, cluster, {"gen-1"}, "train-2", tiny_world.model_dir)
    assert placement["learner"][0]["model_dir"].startswith(str(cluster.nodes["train-2"].temp_dir))

    after = metrics_rows(second.run_path)[len(before):]
    lineage = [m["step"] for m in before if m["step"] < state.step] + [m["step"] for m in after]
    print(f"[test] lineage {lineage}", flush=True)
    assert lineage == list(range(steps)), lineage
    assert summary["steps"] == steps
    final = ckpt_io.read_learner_state(ckpt_io.latest_checkpoint(home))
    assert (final.step, final.version) == (steps, steps)
    books = _books(external_redis.url, run_id)
    assert books.outcomes["trained"] == steps * 32, books.as_dict()     # tiny D_R 32: every step once
