"""The model reaches processes through Ray (actors.cluster.model_source), and a process that cannot reach
it fails naming the path and the node. Real Ray (the session's local one), real files.

- object_store: the driver puts the tiny model's files into the object store; a Ray actor whose
  node cache is its own directory materialises them there, byte-identical, once (a second
  process on the "same node" reuses the copy; a half-written copy of a crashed process is replaced);
- shared: a path that is not on the node raises ModelUnavailable naming path and node id;
- a GenerationActor and a learner rank given a missing model fail to start with that message,
  named by the driver-side wait (no vLLM or DeepSpeed engine is built: the check comes first).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from actors.cluster.model_source import COMPLETE, ModelSource, ModelUnavailable, model_files, share_model

pytestmark = pytest.mark.integration


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _resolver(ray, cache: Path):
    """A Ray actor process whose node cache is ``cache`` (as a node started with LAGRL_NODE_CACHE)."""
    @ray.remote(num_cpus=0)
    class Resolver:
        def resolve(self, source):
            from actors.cluster.model_source import resolve_model_dir
            return resolve_model_dir(source), os.getpid()

        def node(self):
            return ray.get_runtime_context().get_node_id()

    return Resolver.options(runtime_env={"env_vars": {"LAGRL_NODE_CACHE": str(cache)}}).remote()


def test_object_store_model_is_materialised_once_per_node(ray_local, tiny_world, tmp_path):
    ray = ray_local
    source = share_model(tiny_world.model_dir, "object_store")
    files = model_files(tiny_world.model_dir)
    assert source.mode == "object_store" and len(source.files) == len(files) > 3
    assert source.nbytes == sum(f.stat().st_size for f in files)
    assert share_model(tiny_world.model_dir, "object_store").digest == source.digest     # content-addressed

    cache = tmp_path / "node-a"
    first = _resolver(ray, cache)
    local, pid = ray.get(first.resolve.remote(source))
    assert Path(local) == cache / "models" / source.digest and local != str(tiny_world.model_dir)
    for f in files:
        rel = f.relative_to(tiny_world.model_dir)
        assert _sha(Path(local) / rel) == _sha(f), rel
    assert (Path(local) / COMPLETE).exists()
    written = {p: p.stat().st_mtime_ns for p in Path(local).rglob("*")}

    # another process on the same node (a restarted actor) reuses the copy: nothing rewritten
    second = _resolver(ray, cache)
    again, pid2 = ray.get(second.resolve.remote(source))
    assert again == local and pid2 != pid
    assert {p: p.stat().st_mtime_ns for p in Path(local).rglob("*")} == written
    assert [p.name for p in (cache / "models").iterdir() if not p.name.endswith(".lock")] == [source.digest]

    # a copy without the completion mark (a process killed while writing) is written again
    (Path(local) / COMPLETE).unlink()
    (Path(local) / "config.json").write_text("torn")
    third = _resolver(ray, cache)
    fixed, _ = ray.get(third.resolve.remote(source))
    assert fixed == local and _sha(Path(fixed) / "config.json") == _sha(tiny_world.model_dir / "config.json")
    for h in (first, second, third):
        ray.kill(h)


def test_shared_model_missing_on_the_node_names_path_and_node(ray_local, tmp_path):
    ray = ray_local
    missing = tmp_path / "not-on-this-node" / "model"
    probe = _resolver(ray, tmp_path / "cache")
    node_id = ray.get(probe.node.remote())
    with pytest.raises(ray.exceptions.RayTaskError) as err:
        ray.get(probe.resolve.remote(ModelSource(path=str(missing), mode="shared")))
    assert isinstance(err.value.cause, ModelUnavailable)
    message = str(err.value.cause)
    ip = next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)
    assert str(missing) in message and node_id in message and f"({ip}, node id" in message, message
    with pytest.raises(ModelUnavailable, match="no config.json on the driver's node"):
        share_model(missing, "shared")
    ray.kill(probe)


def test_generation_actor_and_learner_rank_without_their_model_fail_naming_it(ray_local, tmp_path, redis_server):
    from actors.config import ActorConfig
    from actors.factory import create_generation_actors, wait_started
    from learner.rank_actor import RankGroup
    from learner.trainer_config import LearnerConfig

    ray = ray_local
    missing = str(tmp_path / "gone" / "model")
    cfg = ActorConfig(num_actors=1, max_restarts=0)
    actors = create_generation_actors(cfg, "t-missing-model", redis_server.url, ModelSource(missing, "shared"),
                                      group_size=2)
    with pytest.raises(RuntimeError) as err:
        wait_started(actors, cfg, "t-missing-model", log=lambda line: None)
    message = str(err.value)
    assert "lagrl-gen-t-missing-model-0 failed to start" in message
    assert missing in message and "is not readable on node" in message and "node id" in message
    ray.kill(actors[0])

    with pytest.raises(ray.exceptions.RayTaskError) as err:
        RankGroup(LearnerConfig(checkpoint_every=0), ModelSource(missing, "shared"), group_size=2)
    assert isinstance(err.value.cause, ModelUnavailable) and missing in str(err.value.cause)
