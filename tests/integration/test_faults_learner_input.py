"""Faults at run level (DESIGN.md §10), part 2: the learner killed mid-run, bad input inside a
running system, and what the run exposes on the network.

1. Learner death: the tiny on-policy driver (learner in-process) runs as a subprocess attached to a
   Ray head this test owns (RAY_ADDRESS), so a SIGKILL of the driver takes its job's actors with it
   while the run's embedded redis-server survives. The same command is run again: it re-attaches
   Redis, resumes from the last checkpoint (same version, same stream position), finishes, and the
   books balance (no prompt or group lost, none consumed twice), with no step trained twice in the
   final model's lineage.
2. Bad input: during a short in-process run, malformed / wrong-schema / length-mismatch / NaN /
   inf / oversize groups are XADDed to `groups`, and too-long / empty / reward-raising prompts
   are put on `prompts`. Each is dead-lettered with its reason (the reward failure: scored 0 with
   the reason `reward_error` and recorded), the run completes, and the books balance once the
   hand-XADDed entries (never counted as issued/written) are accounted for.
3. Exposure: the driver's embedded Redis (loopback + password: tests/integration/test_buffer_server.py
   checks the server class; here the one the driver started), the driver's local Ray (every
   listening socket of the processes it started is on 127.0.0.1, no dashboard), and the code
   sandbox (cannot reach the run's Redis on 127.0.0.1, the node IP or an external address).

    flock /tmp/lagrl-heavy.lock .venv/bin/python -m pytest -s tests/integration/test_faults_learner_input.py
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from rewards.workers import RewardPool
from tests.integration.harness import audit_books, finished_run_audit, metrics_rows, start_driver

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
RAISE_SOURCE = "fault:raising_scorer"     # data_source for which the test's reward pool raises


# ----------------------------------------------------------------------------- helpers
def _stop_run_redis(run_path: Path) -> None:
    """Stop the embedded redis-server a killed driver left running in ``run_path`` (that pid only)."""
    from buffer.server import EmbeddedRedis

    server = EmbeddedRedis(run_path, stop_at_exit=False)
    pid = server._read_json().get("pid") if server.json_path.exists() else None
    if pid and server._is_ours(pid):
        server.start().stop(timeout_s=20)     # adopts the live server, then a clean shutdown


def _driver(tmp_path: Path, ray_address: str, env: dict, run_id: str, args: list[str], tag: str):
    """`launch/onpolicy.py --tiny` joined to the test's Ray head, with its own embedded Redis."""
    return start_driver("onpolicy.py", tmp_path, run_id, ["--tiny", *args], log_name=f"driver-{tag}", env=env,
                        ray_address=ray_address)


# ----------------------------------------------------------------------------- 1. learner death
def test_driver_sigkill_resumes_from_checkpoint_nothing_lost_nothing_trained_twice(ray_head, tmp_path, tiny_world):
    from learner import checkpoint as ckpt_io

    address, env = ray_head.gcs, ray_head.env
    env = {**env, "LAGRL_CACHE": str(tiny_world.root.parent)}
    run_id, steps, every = "kill-learner", 5, 2
    args = ["--steps", str(steps), "--learner.checkpoint_every", str(every), "--data.eval_n", "1",
            "--data.eval_max_problems", "4", "--buffer.reclaim_idle_ms", "5000"]
    t0 = time.monotonic()
    first = _driver(tmp_path, address, env, run_id, args, "first")
    run_path = first.run_path
    try:
        # a checkpoint exists (after step index every-1) and the step after it is done: step `every`
        # is trained but not checkpointed, and step every+1 is in progress when the driver dies
        first.wait_for(lambda: any(m["step"] == every for m in metrics_rows(run_path)),
                       f"step {every} to finish", timeout_s=400)
        latest = ckpt_io.latest_checkpoint(run_path)
        assert latest is not None and latest.name == f"step_{every:06d}", latest
        first.kill()
    finally:
        first.close()
    killed_at = time.monotonic() - t0
    url = (run_path / "redis_url.txt").read_text().strip()
    before = metrics_rows(run_path)
    state = ckpt_io.read_learner_state(latest)
    at_kill = audit_books(url, run_id)
    print(f"[test] SIGKILL after {killed_at:.0f}s: metrics steps {[m['step'] for m in before]}, "
          f"checkpoint {latest.name} (version {state.version}, stream {state.stream_position})")
    print(f"[audit at kill] {at_kill.line()}")

    try:
        second = _driver(tmp_path, address, env, run_id, args, "second")
        try:
            second.finish(timeout_s=400)
        finally:
            second.close()
        log = second.log()
        resumed = re.search(r"resumed from (\S+) at step (\d+), version (\d+) \(buffer at (\d+)\)", log)
        assert resumed, log[-5000:]
        assert Path(resumed.group(1)).name == latest.name
        assert (int(resumed.group(2)), int(resumed.group(3))) == (state.step, state.version) == (every, every)
        assert int(resumed.group(4)) >= state.version   # the killed learner may have published past it
        assert url.split("@")[-1] in log, "the rerun did not re-attach the run's redis-server"

        # lineage: steps 0..every-1 from the first incarnation (in the checkpoint), every..steps-1 from
        # the second; each exactly once, in order
        after = metrics_rows(run_path)[len(before):]
        lineage = [m["step"] for m in before if m["step"] < state.step] + [m["step"] for m in after]
        print(f"[test] second run steps {[m['step'] for m in after]}; lineage {lineage}; "
              f"versions {[m['version'] for m in after]}")
        assert lineage == list(range(steps)), lineage
        assert [m["version"] for m in after] == list(range(every + 1, steps + 1))   # on-policy: 1 update/step
        assert all(m["lag/max"] == 0 for m in after)
        summary = json.loads((run_path / "summary.json").read_text())
        assert summary["steps"] == summary["steps_total"] == steps     # the whole run, both incarnations
        evals = [e["step"] for e in summary["evals"]]                  # ... and both incarnations' evaluations
        assert evals[0] == 0 and evals[-1] == steps and evals == sorted(set(evals)), evals
        final = ckpt_io.read_learner_state(ckpt_io.latest_checkpoint(run_path))
        assert (final.step, final.version) == (steps, steps)

        books = finished_run_audit(run_path, run_id)
        print(f"[audit] {books.line()}")
        assert books.prompts_lost == 0 and books.groups_lost == 0 and books.duplicates == 0, books.as_dict()
        assert books.balanced, books.as_dict()
        # every trained group ACKed once as trained: the retrained step's groups were never ACKed before
        assert books.outcomes["trained"] == steps * json.loads((run_path / "config.json").read_text())[
            "learner"]["batch"]["rollout_batch"], books.as_dict()
        print(f"[test] wall {time.monotonic() - t0:.0f}s")
    finally:
        _stop_run_redis(run_path)


# ----------------------------------------------------------------------------- 2. bad input
class RaisingRewardPool(RewardPool):
    """The run's reward pool, except that a group of ``RAISE_SOURCE`` comes back failed, as one whose scoring
    raised in a worker (a reward system failure: ``rewards.scoring.score_requests`` puts the exception in
    its place). Module level, so Ray pickles it by reference (workers import this module)."""

    def score_many(self, requests):
        # the groups scored with a failing one are scored: only the failing group is dead-lettered
        results = super().score_many(requests)
        return [RuntimeError("injected scorer failure") if r.data_source == RAISE_SOURCE else res
                for r, res in zip(requests, results)]


def _bad_groups(max_bytes: int) -> dict[str, bytes]:
    """Payloads XADDed by hand to `groups`, by the dead-letter reason each must get."""
    from buffer.codec import encode_group
    from bench.synthetic import make_group
    from tests.samples import tamper, tamper_response

    good = encode_group(make_group("fault-good", n=4, tokens=8))
    nan = np.full(8, np.nan, dtype="<f4")
    inf = np.array([-1.0] * 7 + [-np.inf], dtype="<f4")
    oversize = encode_group(make_group("fault-oversize", n=16, tokens=max_bytes // 64))
    assert len(oversize) > max_bytes
    return {
        "malformed_msgpack": b"\xc1 not msgpack",
        "unknown_schema": tamper(good, schema=99),
        "length_mismatch": tamper_response(good, 1, logprobs=np.zeros(5, dtype="<f4").tobytes()),
        "nonfinite_logprobs": tamper_response(tamper(good, group_id="fault-nan"), 2, logprobs=nan.tobytes()),
        "nonfinite_logprobs/inf": tamper_response(tamper(good, group_id="fault-inf"), 3, logprobs=inf.tobytes()),
        "oversize": oversize,
    }


def test_bad_input_in_a_running_run_is_dead_lettered_and_books_balance(ray_local, tmp_path, tiny_world, monkeypatch):
    from transformers import AutoTokenizer

    import launch.run.driver
    from buffer import RunBuffer, connect
    from launch.run.compose import build_config
    from launch.run.data import PromptRenderer
    from launch.run.driver import run
    from launch.worlds.tiny.task import PROMPT_TEMPLATE

    monkeypatch.setattr(launch.run.driver, "RewardPool", RaisingRewardPool)     # the name the driver builds it by
    max_bytes, steps, run_id = 64 << 10, 4, "bad-input"
    cfg, _ = build_config(["--tiny", "--steps", str(steps), "--run_dir", str(tmp_path / "runs"), "--run_id", run_id,
                           "--buffer.max_message_bytes", str(max_bytes), "--data.eval_n", "1",
                           "--data.eval_max_problems", "4"], default_preset="onpolicy")
    run_path = cfg.path
    renderer = PromptRenderer(AutoTokenizer.from_pretrained(tiny_world.model_dir), False, PROMPT_TEMPLATE)
    t0 = time.monotonic()
    found: dict = {}

    def inject() -> None:
        """Runs beside the driver (which needs the main thread for its signal handlers)."""
        try:
            _inject(run_path, run_id, cfg, renderer, found)
        except BaseException as exc:   # reported by the main thread
            found["error"] = exc

    injector = threading.Thread(target=inject, name="injector", daemon=True)
    injector.start()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        run(cfg)
    finally:
        for sig, handler in handlers.items():     # the driver installs its own
            signal.signal(sig, handler)
    injector.join(timeout=30)
    if "error" in found:
        raise found["error"]
    assert found.get("exposure_checked") and found.get("injected"), "the run finished before the injection"
    bad = found["bad"]
    metrics = metrics_rows(run_path)
    assert [m["step"] for m in metrics] == list(range(steps))

    from buffer.audit import audit
    from buffer.server import EmbeddedRedis
    with EmbeddedRedis.attach_or_start(run_path) as server:    # the driver stopped it; AOF restores it
        client = connect(server.url)
        books = audit(client, run_id)
        letters = RunBuffer(client, run_id, cfg.buffer).dead_letters(10_000)
        groups = {g.group_id: g for _, g in _all_groups(client, run_id)}
        client.close()
    print(f"[audit] {books.line()}")
    by_reason: dict[str, list[dict]] = {}
    for d in letters:
        by_reason.setdefault(d["reason"], []).append(d)
    print(f"[dead letters] {sorted((r, len(v)) for r, v in by_reason.items())}")
    for d in letters:
        if d["reason"] != "stale":
            print(f"  {d['source']:>14} {d['reason']:<20} {d['detail'][:110]}")

    # every hand-XADDed group dead-lettered from the groups stream with its reason
    group_letters = [d for d in letters if d["stream"].endswith(":groups")]
    expected = sorted(r.split("/")[0] for r in bad)
    assert sorted(d["reason"] for d in group_letters) == expected, group_letters
    assert next(d for d in group_letters if d["reason"] == "oversize")["raw_len"] > max_bytes
    # injected prompts: dead-lettered at read (empty), by the actor (too long), after the reward (raising)
    prompt_letters = {d["reason"]: d for d in letters if d["stream"].endswith(":prompts")}
    for reason in ("empty_prompt", "prompt_too_long", "reward_error"):
        assert reason in prompt_letters, (reason, sorted(prompt_letters))
    assert "fault-too-long" in prompt_letters["prompt_too_long"]["detail"]
    assert "fault-raising-reward" in prompt_letters["reward_error"]["detail"]
    assert "injected scorer failure" in prompt_letters["reward_error"]["detail"]
    assert "fault-raising-reward" not in groups and "fault-too-long" not in groups
    handled = groups["fault-empty-text"]
    assert {r.reward_info["reason"] for r in handled.responses} == {"bad_gold"}
    assert all(r.reward == 0.0 for r in handled.responses)

    # the books: prompts balance exactly; the hand-XADDed groups were dead-lettered but never
    # counted as written, so they are exactly len(bad) "negative lost"
    assert books.prompts_lost == 0 and books.duplicates == 0 and books.outcomes_unexplained == 0, books.as_dict()
    assert books.groups_lost == -len(bad), books.as_dict()
    assert books.groups_deadlettered == len(bad)
    assert books.prompts_deadlettered == 3
    print(f"[test] wall {time.monotonic() - t0:.0f}s")


def _inject(run_path: Path, run_id: str, cfg, renderer, found: dict) -> None:
    """Check the driver's redis-server exposure as soon as it is up (the run cannot have ended
    yet), then wait for step 0 and inject the bad groups and prompts."""
    from buffer import RunBuffer
    from buffer.keys import PAYLOAD
    from buffer.messages import PromptMsg

    deadline = time.monotonic() + 300
    while not (run_path / "redis_url.txt").exists():
        assert time.monotonic() < deadline, "the driver wrote no redis_url.txt after 300 s"
        time.sleep(0.2)
    url = (run_path / "redis_url.txt").read_text().strip()
    _check_redis_exposure(run_path, url)
    found["exposure_checked"] = True
    while not metrics_rows(run_path):
        assert time.monotonic() < deadline, "no step 0 after 300 s"
        time.sleep(0.2)
    buf = RunBuffer.from_url(url, run_id, cfg.buffer)
    found["bad"] = bad = _bad_groups(cfg.buffer.max_message_bytes)
    for payload in bad.values():                    # by hand: never counted as written
        buf.client.xadd(buf.keys.groups, {PAYLOAD: payload})
    short = np.asarray(renderer.ids("1 + 1 ="), dtype=np.int32)
    prompt = dict(answer="2", n_samples=cfg.group_size, max_tokens=cfg.data.stages[0].max_tokens, step=0, min_version=0)
    buf.put_prompts([   # through put_prompts: counted as issued like the feeder's
        PromptMsg(prompt_id="fault-too-long", data_source="tiny_arith",
                  prompt_ids=np.resize(short, cfg.actors.max_model_len + 8), **prompt),
        PromptMsg(prompt_id="fault-empty-ids", data_source="tiny_arith", prompt_ids=np.zeros(0, dtype=np.int32), **prompt),
        PromptMsg(prompt_id="fault-raising-reward", data_source=RAISE_SOURCE, prompt_ids=short, **prompt),
        # handled, not dead-lettered: an empty problem text renders to the template alone; generated
        # and scored (gold "" -> bad_gold, reward 0 for all: zero advantage, filtered or stale)
        PromptMsg(prompt_id="fault-empty-text", data_source="tiny_arith",
                  prompt_ids=np.asarray(renderer.ids(""), dtype=np.int32), **{**prompt, "answer": ""}),
    ])
    found["injected"] = True
    buf.close()


def _check_redis_exposure(run_path: Path, url: str) -> None:
    """The driver's own embedded redis-server: loopback only, and a client without the password is
    refused. The probe is one raw RESP PING on a plain socket: redis-py retries an
    AuthenticationError (a ConnectionError subclass) with backoff for ~4 s, long enough for a short
    run to stop its server and turn the answer into "connection refused"."""
    redis_pid = json.loads((run_path / "redis.json").read_text())["pid"]
    listening = [c.laddr for c in psutil.Process(redis_pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    print(f"[exposure] driver's redis-server pid {redis_pid} listens on {listening}")
    assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
    assert port in {a.port for a in listening}, (port, listening)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        reply = sock.recv(256)
    print(f"[exposure] unauthenticated PING answered {reply[:60]!r}")
    assert reply.startswith(b"-NOAUTH"), reply


def _all_groups(client, run_id: str):
    from buffer.codec import decode_group
    from buffer.keys import RunKeys
    from buffer.messages import InvalidMessage

    for eid, fields in client.xrange(RunKeys(run_id).groups):
        try:
            yield eid, decode_group(fields[b"data"])
        except InvalidMessage:
            continue


# ----------------------------------------------------------------------------- 3. exposure
_RAY_PROBE = """
import json, os, sys, time
import psutil
from launch.run.compose import build_config
from launch.run.driver import init_ray
cfg, _ = build_config(["--tiny"], default_preset="onpolicy")
init_ray(cfg)
import ray
@ray.remote(num_cpus=0)
def pid():
    return os.getpid()
worker = ray.get(pid.remote())
time.sleep(3)      # agents finish binding
me = psutil.Process()
rows = []
for p in [me, *me.children(recursive=True)]:
    try:
        for c in p.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                rows.append({"pid": p.pid, "name": p.name(), "cmd": " ".join(p.cmdline())[:160],
                             "ip": c.laddr.ip, "port": c.laddr.port})
    except psutil.Error:
        pass
print("PROBE" + json.dumps({"rows": rows, "worker": worker, "gcs": ray.get_runtime_context().gcs_address,
                             "node_ip": ray.util.get_node_ip_address()}))
ray.shutdown()
"""


# Residual exposure measured with ray 2.60 (documented in README "Network exposure"): ray.init turns
# _node_ip_address="127.0.0.1" into the node's IP (services.resolve_ip_for_localhost), and gcs_server,
# raylet and every core worker listen on "::" (all interfaces), the autoscaler monitor, the dashboard
# head's gRPC and the dashboard agent's gRPC on 0.0.0.0, the runtime-env and dashboard agents' HTTP
# on the node IP. No ray.init argument or environment variable of 2.60 binds them to loopback. No
# dashboard HTTP server (8265) is started. These are Ray-internal gRPC/agent servers only.
RAY_INTERNAL = ("gcs_server", "raylet", "ray::", "autoscaler", "dashboard/dashboard.py", "dashboard/agent.py",
                "runtime_env/agent")


def test_local_ray_started_by_the_driver_exposure(tmp_path):
    """`init_ray` (no RAY_ADDRESS): the listening sockets of the Ray processes it starts (the
    descendants of the probe process). Asserted: no dashboard HTTP server, and everything that is
    not on 127.0.0.1 is one of Ray's internal servers (the residual exposure above, printed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "REDIS_URL")}
    probe = subprocess.run([sys.executable, "-c", _RAY_PROBE], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300, start_new_session=True)
    line = next((x for x in probe.stdout.splitlines() if x.startswith("PROBE")), None)
    assert probe.returncode == 0 and line, (probe.stdout + probe.stderr)[-4000:]
    report = json.loads(line[len("PROBE"):])
    rows = [r for r in report["rows"] if "import psutil" not in r["cmd"]]    # the probe's own driver socket
    print(f"[exposure] ray gcs {report['gcs']}, node ip {report['node_ip']}; listening:")
    for r in sorted(rows, key=lambda r: (r["name"], r["port"])):
        print(f"  {r['ip']:>15}:{r['port']:<6} {r['name']:<20} {r['cmd'][:100]}")
    assert rows, "no listening socket found under the probe: the process walk is broken"
    assert not [r for r in rows if r["port"] == 8265], "a dashboard HTTP server was started"
    exposed = [r for r in rows if r["ip"] not in ("127.0.0.1", "::1")]
    unknown = [r for r in exposed if not any(k in r["name"] + " " + r["cmd"] for k in RAY_INTERNAL)]
    assert not unknown, f"non-Ray-internal listeners beyond loopback: {unknown}"
    print(f"[exposure] RESIDUAL: {len(exposed)} Ray-internal listeners beyond loopback: "
          f"{sorted({(r['name'], r['ip']) for r in exposed})}")


def test_sandbox_cannot_reach_the_run_redis_or_the_network(own_redis):
    from rewards.sandbox import SandboxLimits, isolation_report, run_code

    limits = SandboxLimits(timeout_s=3.0, memory_mb=256, max_output_bytes=4096, max_procs=16)
    isolation = isolation_report(limits)
    if "net" not in isolation:
        pytest.skip(f"no network namespace on this host ({isolation}); rewards/sandbox/runner.py documents "
                    "that the fallback has no network isolation")
    server = own_redis()
    import redis as redis_py
    admin = redis_py.Redis.from_url(server.url)
    before = int(admin.info("stats")["total_connections_received"])
    node_ip = socket.gethostbyname(socket.gethostname())
    targets = [("127.0.0.1", server.port), (node_ip, server.port), ("1.1.1.1", 53), ("192.0.2.2", server.port)]
    program = textwrap.dedent(f"""
        import socket
        for addr in {targets!r}:
            try:
                s = socket.create_connection(addr, timeout=1.0)
                s.sendall(b"PING\\r\\n")
                print("connected", addr, s.recv(64))
            except OSError as e:
                print("failed", addr, type(e).__name__)
    """)
    r = run_code(program, limits=limits)
    print(f"[exposure] sandbox isolation {r.isolation}:\n{r.stdout}")
    after = int(admin.info("stats")["total_connections_received"])
    admin.close()
    assert r.success, r
    assert "connected" not in r.stdout and r.stdout.count("failed") == len(targets), r.stdout
    assert after == before, (before, after)    # no connection reached the server (ours is reused)
