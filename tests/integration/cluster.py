"""A multi-node Ray cluster on one machine, for tests: a head plus worker nodes, each a real
``ray start`` with its own ports, its own temp directory and its own process group.

Each node stands for a machine of its own:

- every listener gets a free port (gcs, node manager, object manager, the agents, metrics, a
  private range of worker ports), all on 127.0.0.1 (``--node-ip-address``), all of a node's from
  one block reserved at once and apart from every other node's: an agent's port can never fall
  inside a worker-port range (``ray start`` refused one such node: "worker_ports is trying to use a
  port number 35071 that is used by other components"), and no two nodes share a port;
- each node has its own ``--temp-dir`` (sessions, sockets, logs, the object store's spill files)
  and its own ``LAGRL_NODE_CACHE`` (where lagrl materialises models): a private "/tmp" per node,
  so nothing passes between nodes through a path by accident;
- custom resources (``{"gen": 1}``, ``{"train": 1}``) say what a node is for; the head gets none,
  so a run placed by resources never lands on the driver's node;
- token auth with a token private to the cluster (README "Network exposure");
- the head's dashboard (Ray's job server) on request (``dashboard=True``): ``cluster.dashboard`` is its
  address, for ``ray job submit`` and ``launch.experiments.science --address``.

A node is stopped by its process group (SIGKILL), as a machine that dies would be: the raylet,
its agents and every worker it started go at once.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from actors.cluster.priority import START_ENV
from launch.experiments.science.local_head import AGENT_PORTS, free_ports   # a node's ports, as the report's head

VENV_BIN = Path(sys.executable).parent
WORKER_PORTS = 40          # a private range per node: two raylets on one IP must not hand out the same port
OBJECT_STORE_BYTES = 256 << 20


@dataclass(frozen=True)
class NodePorts:
    """Every port of one node, out of one reserved block: the agents', then (head only) the GCS, the Ray
    client server and the dashboard, then the worker-port range."""

    agents: dict[str, int]
    workers: tuple[int, int]            # --min-worker-port, --max-worker-port
    gcs: int | None = None
    client_server: int | None = None
    dashboard: int | None = None

    @classmethod
    def reserve(cls, taken: set[int], head: bool) -> NodePorts:
        ports = free_ports(len(AGENT_PORTS) + (3 if head else 0) + WORKER_PORTS, taken)
        taken.update(ports)
        agents, rest = dict(zip(AGENT_PORTS, ports)), ports[len(AGENT_PORTS):]
        gcs, client, dashboard = (rest[0], rest[1], rest[2]) if head else (None, None, None)
        workers = rest[3:] if head else rest
        return cls(agents, (workers[0], workers[-1]), gcs, client, dashboard)


@dataclass
class Node:
    name: str
    resources: dict[str, float]
    temp_dir: Path                 # this node's private "/tmp": Ray's sessions and lagrl's model cache
    proc: subprocess.Popen
    log_path: Path

    @property
    def cache_dir(self) -> Path:
        return self.temp_dir / "lagrl-cache"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        """Every live process of this node's process group (raylet, agents, workers)."""
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.pid) == self.proc.pid:
                    out.append(p.pid)
            except (ProcessLookupError, psutil.Error, OSError):
                continue
        return out

    def kill(self) -> None:
        """SIGKILL every process of the node at once: a machine that dies. The raylet starts its
        workers (actors, their engine subprocesses) in process groups of their own, so the node's
        group alone would leave them running, and a killed actor would go on answering its prompts."""
        try:
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(30)
        psutil.wait_procs(procs, timeout=30)


@dataclass
class LocalCluster:
    """Nodes by name; the head first. ``env`` holds the cluster's token and PATH for clients."""

    root: Path
    gcs: str                       # 127.0.0.1:PORT, set when the head starts
    env: dict
    dashboard: str | None = None   # http://127.0.0.1:PORT, the job server, when started with dashboard=True
    nodes: dict[str, Node] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)        # every port handed to a node of this cluster

    @classmethod
    def start(cls, root: Path, workers: dict[str, dict[str, float]], *, head_cpus: int = 4,
              worker_cpus: int = 4, dashboard: bool = False) -> LocalCluster:
        """A head (no custom resources) and ``workers`` (name -> custom resources), all ready; with
        ``dashboard``, the head's job server answering at ``cluster.dashboard``."""
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "RAY_DEDUP_LOGS": "0",
               "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        for var in ("RAY_ADDRESS", "REDIS_URL", "LAGRL_NODE_CACHE"):
            env.pop(var, None)
        cluster = cls(root=root, gcs="", env=env)
        try:
            cluster._start_node("head", {}, head_cpus, head=True, dashboard=dashboard)
            for name, resources in workers.items():
                cluster.add_node(name, resources, cpus=worker_cpus, wait=False)
            cluster.wait_nodes(timeout_s=180)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def add_node(self, name: str, resources: dict[str, float], *, cpus: int = 4, wait: bool = True) -> Node:
        node = self._start_node(name, resources, cpus, head=False)
        if wait:
            self.wait_nodes(timeout_s=180)
        return node

    def _start_node(self, name: str, resources: dict[str, float], cpus: int, *, head: bool,
                    dashboard: bool = False) -> Node:
        # short, private temp dirs: Ray's socket paths must stay under ~107 characters
        temp_dir = Path(tempfile.mkdtemp(prefix=f"lagrl-{name}-", dir="/tmp"))
        ports = NodePorts.reserve(self.ports, head)
        args = [str(VENV_BIN / "ray"), "start", "--block", "--node-ip-address", "127.0.0.1",
                "--node-name", name, "--num-cpus", str(cpus), "--num-gpus", "0",
                "--temp-dir", str(temp_dir), "--object-store-memory", str(OBJECT_STORE_BYTES),
                "--min-worker-port", str(ports.workers[0]), "--max-worker-port", str(ports.workers[1]),
                "--disable-usage-stats", *[f"--{flag}={port}" for flag, port in ports.agents.items()]]
        if resources:
            args += ["--resources", json.dumps(resources)]
        if head:
            self.gcs = f"127.0.0.1:{ports.gcs}"
            args += ["--head", "--port", str(ports.gcs), f"--ray-client-server-port={ports.client_server}"]
            if dashboard:
                self.dashboard = f"http://127.0.0.1:{ports.dashboard}"
                args += ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                         "--dashboard-port", str(ports.dashboard)]
            else:
                args += ["--include-dashboard", "false"]
        else:
            args += ["--address", self.gcs]
        log_path = self.root / f"ray-{name}.log"
        node_env = {**self.env, **START_ENV, "LAGRL_NODE_CACHE": str(temp_dir / "lagrl-cache")}
        proc = subprocess.Popen(args, env=node_env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        node = Node(name=name, resources=resources, temp_dir=temp_dir, proc=proc, log_path=log_path)
        self.nodes[name] = node
        return node

    def wait_nodes(self, timeout_s: float) -> None:
        """Until every node started here (and alive) is registered with the GCS."""
        deadline, last = time.monotonic() + timeout_s, ""
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if not node.alive and node.proc.returncode not in (-signal.SIGKILL,):
                    raise RuntimeError(f"ray node {node.name} exited: {node.log_path.read_text()[-3000:]}")
            want = {n.name for n in self.nodes.values() if n.alive}
            alive, last = self.alive_node_names()
            if want <= alive:
                return
            time.sleep(1.0)
        raise TimeoutError(f"ray nodes not all up after {timeout_s:.0f}s: {last}")

    def alive_node_names(self) -> tuple[set[str], str]:
        """(names of the nodes the GCS reports alive, the raw answer for errors)."""
        probe = subprocess.run([sys.executable, "-c", _ALIVE_PROBE, self.gcs], env=self.env,
                               capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            return set(), (probe.stdout + probe.stderr)[-1500:]
        nodes = json.loads(probe.stdout.strip().splitlines()[-1])
        return {n["name"] for n in nodes if n["alive"]}, probe.stdout[-1500:]

    def node_ids(self) -> dict[str, str]:
        """node name -> Ray node id (hex), of every node the GCS knows (alive or not)."""
        probe = subprocess.run([sys.executable, "-c", _ALIVE_PROBE, self.gcs], env=self.env,
                               capture_output=True, text=True, timeout=60, check=True)
        return {n["name"]: n["id"] for n in json.loads(probe.stdout.strip().splitlines()[-1])}

    def stop(self) -> None:
        """Workers first, then the head; each by its process group; temp dirs removed."""
        import shutil

        for node in sorted(self.nodes.values(), key=lambda n: n.name == "head"):
            if node.alive:
                try:
                    os.killpg(node.proc.pid, signal.SIGTERM)
                    node.proc.wait(30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            try:
                os.killpg(node.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            shutil.rmtree(node.temp_dir, ignore_errors=True)


# The GCS's node table, read by a short-lived client (a test process never joins the cluster:
# a driver holds on to the cluster's state and our node kills would reach it).
_ALIVE_PROBE = """
import json, sys
from ray._raylet import GcsClient
client = GcsClient(address=sys.argv[1])
nodes = client.get_all_node_info(timeout=30)
print(json.dumps([{"id": i.hex(), "name": n.node_name, "alive": n.state == 0} for i, n in nodes.items()]))
"""
