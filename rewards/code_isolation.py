"""Which walls the code sandbox has on this host, checked once before any program runs (DESIGN.md §10b).

Most users run as an ordinary user, where Ray, the learner, the vLLM engines and redis-server share the
user's identity with the sandbox's launcher: a program that is not walled off by namespaces can signal
them all (``os.kill(-1, 9)``) and read the run directory, the staged weights in /dev/shm and the checkout.
So code rewards need, on every host that runs a reward worker, the walls the sandbox has as root:

    net      a network namespace (loopback down)         pid      a pid namespace: no process outside
    mount    a mount namespace ...                        ipc      an ipc namespace
    rootfs   ... with the minimal read-only root          seccomp  the system-call filter

As root they come from the namespaces alone; as an ordinary user from an unprivileged user namespace
("userns" in the report). ``code_isolation`` (RewardConfig) decides what happens where some are missing:
"strict" (the default) refuses with an ``error:`` line naming them and the fixes, "weak" accepts it.
The walls that only root adds (a throwaway uid, a memory cgroup, a CPU quota) are not required: without
them memory is bounded by RLIMIT_AS per process and the sandbox's RSS watchdog, processes by
RLIMIT_NPROC in the user namespace and the watchdog's count, CPU by RLIMIT_CPU per process
(rewards/sandbox/runner.py).
"""

from __future__ import annotations

import os

from rewards.code_reward import limits_from
from rewards.config import RewardConfig
from rewards.sandbox import run_code

REQUIRED = ("net", "mount", "rootfs", "pid", "ipc", "seccomp")
FLAG = "--rewards.code_isolation weak"


class SandboxRefused(RuntimeError):
    """Code rewards cannot start with the isolation this host gives (the message says what and how to fix it)."""


def check_code_isolation(cfg: RewardConfig) -> tuple[str, ...]:
    """Run a trivial program in the sandbox as the reward worker will; its isolation report, or
    SandboxRefused where a required wall is missing and ``cfg.code_isolation`` is "strict"."""
    result = run_code("pass", limits=limits_from(cfg))
    if not result.success:
        raise SandboxRefused(f"error: the code sandbox cannot start on this host ({result.error}); code rewards "
                             "need it. Fix the host, or train on math only.")
    missing = [wall for wall in REQUIRED if wall not in result.isolation]
    if missing and cfg.code_isolation == "strict":
        raise SandboxRefused(refusal(missing, result.isolation))
    return result.isolation


def refusal(missing: list[str], isolation: tuple[str, ...]) -> str:
    """The error line: what is missing, why it matters, what would give it, and the flag that accepts less."""
    why = ("a sandboxed program could then signal your other processes (Ray, the learner, the engines, "
           "redis-server: os.kill(-1, 9) ends the run) and read your run directory, /dev/shm and the checkout"
           if {"pid", "mount", "rootfs"} & set(missing) else "a sandboxed program would reach more of this host")
    if os.geteuid() == 0:
        fix = ("as root the namespaces come from unshare(2): this kernel or container refuses them (a container "
               "without CAP_SYS_ADMIN, or a seccomp profile that blocks unshare)")
    else:
        fix = ("as an ordinary user they come from an unprivileged user namespace, which this host does not "
               "allow: check sysctl user.max_user_namespaces (> 0), kernel.unprivileged_userns_clone (= 1), "
               "kernel.apparmor_restrict_unprivileged_userns (= 0), or the container's seccomp profile")
    if "seccomp" in missing:
        fix += "; the system-call filter needs x86-64 or arm64 and a kernel that accepts seccomp filters"
    return (f"error: the code sandbox on this host lacks {', '.join(missing)} (it has: "
            f"{', '.join(isolation) or 'nothing'}); {why}. Code rewards refuse to start. {fix[0].upper()}{fix[1:]}. "
            f"To run with this weaker isolation anyway, pass {FLAG}.")


def describe(isolation: tuple[str, ...], cfg: RewardConfig) -> str:
    """One console line: the walls in force, and whether that is the strict set or a weaker one accepted."""
    missing = [wall for wall in REQUIRED if wall not in isolation]
    verdict = (f"weak, accepted by {FLAG}: no {', '.join(missing)}" if missing
               else f"every required wall ({cfg.code_isolation})")
    return f"[rewards] code sandbox isolation: {', '.join(isolation) or 'none'} ({verdict})"
