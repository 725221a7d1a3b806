"""One local Ray for a whole report on one machine: a head with its job server, started when the report
starts and stopped when it ends, which every run joins as a Ray job (``launch.experiments.science.jobs``):
no Ray start per run.

Its dashboard and job server on 127.0.0.1 (Ray's own gRPC servers listen where Ray puts them: `ray start`
replaces 127.0.0.1 by the host's address), every port a free one (none of Ray's fixed defaults, so two
reports can run side by side), token auth with a token of its own, workers
at normal priority (``RAY_worker_niceness``, actors.cluster.priority), its own temp directory; stopped by
its process group, which it leads.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from actors.cluster.priority import START_ENV

START_TIMEOUT_S = 180.0
PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the head's process before exec: SIGTERM when the report's process dies, however it dies (its
    ``ray start --block`` then stops the head's processes)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


AGENT_PORTS = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
               "metrics-export-port", "node-manager-port", "object-manager-port")
WORKER_PORTS = 200         # the head's own range for its worker processes (every actor and task of the runs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int, taken: set[int] = frozenset()) -> list[int]:
    """``n`` consecutive ports, each free now (bound once to check) and none of ``taken`` (ports handed out
    already, which their owner may not have bound yet): a second Ray on this host (a test's, another
    report's) keeps Ray's fixed defaults; sharing one of them, this head's job server would talk to the
    other's agent."""
    for _ in range(200):
        start = free_port()
        ports = list(range(start, start + n))
        if ports[-1] >= 65000 or taken.intersection(ports):
            continue
        socks = []
        try:
            for port in ports:
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", port))
            return ports
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports for a Ray node")


@dataclass
class LocalHead:
    address: str            # the job server: http://127.0.0.1:<dashboard port>
    headers: dict           # what a job client sends (the head's own token: Ray caches the first token a
                            # process reads, so an environment variable set now would not reach it)
    proc: subprocess.Popen
    temp_dir: Path
    log_path: Path

    @classmethod
    def start(cls, cpus: int, log_dir: Path) -> LocalHead:
        """A head with ``cpus`` CPUs, ready for jobs (its job API answers), or RuntimeError with its log's tail."""
        # short: Ray's socket paths must stay under ~107 characters
        temp_dir = Path(tempfile.mkdtemp(prefix="lagrl-report-ray-", dir="/tmp"))
        # every port a free one, none of Ray's fixed defaults (see free_ports)
        # one block for all of them: two blocks found one after the other could overlap (each is free only
        # while it is being checked)
        block = free_ports(3 + len(AGENT_PORTS) + WORKER_PORTS)
        gcs, dashboard, client_server = block[:3]
        agents, workers = block[3:3 + len(AGENT_PORTS)], block[3 + len(AGENT_PORTS):]
        # the jobs' `python` is this interpreter (its virtualenv first on PATH), as `ray start` from an activated
        # virtualenv gives on a cluster
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), **START_ENV,
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        env.pop("RAY_ADDRESS", None)
        ray = Path(sys.executable).with_name("ray")
        args = [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
                "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--include-dashboard", "true",
                f"--ray-client-server-port={client_server}",
                "--num-cpus", str(cpus), "--temp-dir", str(temp_dir), "--disable-usage-stats",
                "--min-worker-port", str(workers[0]), "--max-worker-port", str(workers[-1]),
                *[f"--{flag}={port}" for flag, port in zip(AGENT_PORTS, agents)]]
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / "ray-head.log"
        proc = subprocess.Popen(args, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_stop_with_parent)
        head = cls(f"http://127.0.0.1:{dashboard}", {"Authorization": f"Bearer {env['RAY_AUTH_TOKEN']}"},
                   proc, temp_dir, log_path)
        try:
            head.wait_ready()
        except BaseException:
            head.stop()
            raise
        return head

    def wait_ready(self) -> None:
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the report's Ray head exited {self.proc.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-1500:]}")
            try:
                JobSubmissionClient(self.address, headers=self.headers).list_jobs()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the report's Ray head did not answer at {self.address} within "
                                       f"{START_TIMEOUT_S:.0f} s: {self.log_path.read_text(errors='replace')[-1500:]}")
                time.sleep(1.0)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)
