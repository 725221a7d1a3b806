"""Escape attempts against the code sandbox, run as whichever user starts this script (root, or an
ordinary user through tests/unprivileged.py): what a hostile policy would try against the user's other
processes and files. Prints one JSON object, {attack: {"held": bool, "detail": str}}, read by
tests/unit/test_rewards_sandbox_identities.py.

    python tests/sandbox_escapes.py            # as root: the throwaway uid; as a user: the user namespace

Before the attacks it sets up, as this user, what a run has beside the sandbox: a victim process (a Ray
worker, the learner, redis-server) with a secret in its environment, a run directory (0700) with a
password file, a staged weight file in /dev/shm, and this process itself (the reward worker). If the
sandbox refuses to start here (code_isolation strict, walls missing), it prints {"refused": message}.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import psutil

from rewards.code_isolation import SandboxRefused, check_code_isolation
from rewards.code_reward import limits_from
from rewards.config import RewardConfig
from rewards.sandbox import CodeTest, run_code, run_tests

CHECKOUT = Path(__file__).resolve().parents[1]
CHECKOUT_FILES = (CHECKOUT / "rewards" / "sandbox" / "runner.py", CHECKOUT / "rewards" / "eval_data" / "aime24.jsonl")
CFG = RewardConfig(code_test_timeout_s=5.0, code_memory_mb=256, max_output_bytes=1 << 16, code_max_procs=16)
LIMITS = limits_from(CFG)


def program(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"


class Host:
    """What the program must not reach, all of this user."""

    def __init__(self):
        self.secret = secrets.token_hex(12)
        self.victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                       env={"PATH": "/usr/bin:/bin", "LAGRL_VICTIM_SECRET": self.secret})
        self.run_dir = Path(tempfile.mkdtemp(prefix="lagrl-run-"))        # 0700, as a run directory is
        self.redis_json = self.run_dir / "redis.json"
        self.redis_json.write_text(json.dumps({"password": self.secret}))
        self.shm = Path("/dev/shm") / f"lagrl-escape-victim-{secrets.token_hex(6)}"   # a staged file's stand-in
        self.shm.write_bytes(b"W" * 4096)
        self.shm.chmod(0o600)
        self.pids = (os.getpid(), self.victim.pid)

    def alive(self) -> bool:
        return self.victim.poll() is None

    def intact(self) -> bool:
        return (self.redis_json.read_text() == json.dumps({"password": self.secret})
                and sorted(p.name for p in self.run_dir.iterdir()) == ["redis.json"]
                and self.shm.read_bytes() == b"W" * 4096)

    def close(self) -> None:
        self.victim.kill()
        self.victim.wait()
        self.shm.unlink(missing_ok=True)
        for p in self.run_dir.iterdir():
            p.unlink()
        self.run_dir.rmdir()


def signals(host: Host) -> tuple[bool, str]:
    """kill the worker, the victim, every pid the program can see, and -1: nothing of the host dies."""
    r = run_code(program(f"""
        import os, signal
        out = []
        for pid in {list(host.pids)} + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                out.append(f"sent {{pid}}")
            except OSError as e:
                out.append(f"refused {{pid}} {{type(e).__name__}}")
        for pid in {list(host.pids)}:
            try:
                fd = os.pidfd_open(pid)
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                out.append(f"pidfd {{pid}}")
            except OSError as e:
                out.append(f"pidfd refused {{pid}} {{type(e).__name__}}")
        print("; ".join(out), flush=True)
        os.kill(-1, signal.SIGKILL)
    """), limits=LIMITS)
    time.sleep(0.2)
    return host.alive(), f"{r.stdout.strip()[:300]} | {r.error}"


def environ(host: Host) -> tuple[bool, str]:
    r = run_code(program(f"""
        import os
        for pid in [{host.victim.pid}] + [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                print(pid, open(f"/proc/{{pid}}/environ", "rb").read())
            except OSError as e:
                print(pid, "denied", type(e).__name__)
    """), limits=LIMITS)
    return host.secret not in r.stdout, r.stdout[:300]


def files(host: Host) -> tuple[bool, str]:
    """Read, write, truncate and remove the run directory's files, the staged weights, the checkout."""
    targets = [str(host.redis_json), str(host.shm), *map(str, CHECKOUT_FILES)]
    created = [str(host.run_dir / "dropped"), str(CHECKOUT / "ESCAPED")]
    r = run_code(program(f"""
        import os
        for path in {targets}:
            for what, act in (("read", lambda p: open(p, "rb").read(64)), ("write", lambda p: open(p, "r+b").write(b"X")),
                              ("truncate", lambda p: os.truncate(p, 0)), ("remove", os.unlink)):
                try:
                    act(path)
                    print("DID", what, path)
                except OSError as e:
                    print("no", what, path, type(e).__name__)
        for path in {created}:
            try:
                open(path, "x").close()         # inside the sandbox this may be its own private /tmp: only the
                print("made", path)             # host's side below says whether it escaped
            except OSError as e:
                print("no create", path, type(e).__name__)
    """), limits=LIMITS)
    escaped = [p for p in created if Path(p).exists()]
    touched = [line for line in r.stdout.splitlines() if line.startswith("DID")]
    return not touched and host.intact() and not escaped, f"{touched} {escaped} | {r.stdout[-600:]}"


def fork_bomb(host: Host) -> tuple[bool, str]:
    before = len(psutil.pids())
    r = run_code(program("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """), limits=LIMITS)
    time.sleep(0.2)
    contained = not r.success and (r.timeout or r.memory_exceeded or "process limit" in r.error)
    return contained and host.alive() and len(psutil.pids()) < before + 20, f"{r.error}, {len(psutil.pids()) - before} more pids"


def memory(host: Host) -> tuple[bool, str]:
    """One huge allocation, and a tree of processes each under RLIMIT_AS whose sum is not."""
    single = run_code("x = bytearray(10 ** 10)\n", limits=LIMITS)
    tree = run_code(program("""
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                break
        block = bytearray(150 * 2 ** 20)
        time.sleep(8)
    """), limits=replace(LIMITS, timeout_s=10.0))
    return single.memory_exceeded and tree.memory_exceeded, f"{single.error}; {tree.error}"


def capabilities(host: Host) -> tuple[bool, str]:
    """No capability in the program's effective or permitted set (its own namespaces' included)."""
    r = run_code(program("""
        fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print(int(fields["CapEff"], 16), int(fields["CapPrm"], 16))
    """), limits=LIMITS)
    return r.success and r.stdout.split() == ["0", "0"], r.stdout.strip() or r.error


def forged_verdict(host: Host) -> tuple[bool, str]:
    """A wrong answer to an assert test that writes "ok" records wherever it can reach (the capture files,
    init's and the judge's descriptors) and kills the judge: the test must still fail."""
    code = program("""
        import os, signal
        def f():
            return 0
        record = '{"status": "ok"}\\n'
        reached = []
        for d in ("/tmp/sbx/cap", "/tmp/sbx"):
            try:
                for name in os.listdir(d):
                    with open(os.path.join(d, name), "w") as out:
                        out.write(record)
                    reached.append(name)
            except OSError:
                pass
        for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with open(f"/proc/{pid}/fd/{fd}", "w") as out:
                        out.write(record)
                    reached.append(f"{pid}/{fd}")
            except OSError:
                pass
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        print(reached)
    """)
    runs = run_tests(code, [CodeTest("assert", code="assert f() == 1")], LIMITS)
    return not runs[0].success, f"{runs[0].error} | {runs[0].stdout[:200]}"


ATTACKS = (signals, environ, files, fork_bomb, memory, capabilities, forged_verdict)


def main() -> None:
    try:
        isolation = check_code_isolation(CFG)
    except SandboxRefused as exc:
        print(json.dumps({"refused": str(exc)}))
        return
    host = Host()
    out: dict = {"isolation": list(isolation), "uid": os.getuid()}
    try:
        for attack in ATTACKS:
            held, detail = attack(host)
            out[attack.__name__] = {"held": bool(held and host.alive()), "detail": detail}
    finally:
        host.close()
    print(json.dumps(out))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    main()
