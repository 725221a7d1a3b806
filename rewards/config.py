"""RewardConfig: every knob of the verifiers, the code sandbox and the reward worker pool (DESIGN.md §7).

Typed, bounded and documented once; unknown keys fail loudly (a typo in a preset must not silently
fall back to a default). Defaults follow the Skywork-OR1 recipe (1/0 math reward, math-verify with a
timeout) and common code-RL practice (a few seconds and ~1 GiB per test).
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field


class RewardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # --- math -------------------------------------------------------------------------------------
    signed_reward: bool = Field(
        False, description="False: correct = 1, anything else = 0 (Skywork-OR1). True: correct = +1, "
        "anything else (wrong, no box, parse error, timeout) = -1. A bad gold answer is 0 in both modes.")
    math_timeout_s: float = Field(
        5.0, gt=0, le=300, description="Wall-clock budget for parsing + verifying one extracted answer "
        "(math-verify's own default is 5 s). Enforced in the verifier subprocess by a timer; a "
        "computation that ignores the timer (e.g. C-level big-integer powers) is killed by the parent "
        "after math_kill_grace_s more, and the subprocess is replaced.")
    math_kill_grace_s: float = Field(
        1.0, ge=0.05, le=60, description="Extra time past math_timeout_s before the parent kills a "
        "verifier subprocess that did not honour its soft timeout.")
    math_group_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="Wall-clock budget for all the distinct answers of one group "
        "together. Once it is spent, each answer left gets a short timer (0.25 s; an ordinary answer "
        "takes 1-5 ms), so a group of 16 different slow answers costs ~this plus 4 s, not 16 x "
        "math_timeout_s; past it, after two hard kills of the verifier (answers stuck in C), the answers "
        "left are timeouts unverified. An answer cut short is a timeout (reward as wrong), never dropped.")
    math_startup_timeout_s: float = Field(
        60.0, gt=0, le=600, description="How long a fresh verifier subprocess may take to import "
        "math-verify/sympy (≈0.5 s idle, much more on a loaded machine) before scoring gives up with "
        "reason 'timeout'.")
    math_memory_mb: int = Field(
        2048, ge=128, le=1 << 20, description="Address-space limit (RLIMIT_AS) of the verifier subprocess: "
        "an answer that makes sympy build a huge number (2^{2^{34}}) fails there with MemoryError (reward 0) "
        "instead of growing until the kill. Idle it maps ~60-100 MB.")
    max_box_chars: int = Field(
        4096, ge=16, le=1_000_000, description="Longest \\boxed{} content that is parsed; longer content "
        "is a parse_error. Bounds the verifier's work on adversarial or degenerate outputs.")
    think_end_tag: str = Field(
        "</think>", min_length=1, description="End of the reasoning section; only the text after its "
        "last occurrence is searched for the answer. An opened but unterminated reasoning section "
        "(see think_start_tag) has no answer.")
    think_start_tag: str = Field("<think>", min_length=1, description="Start of the reasoning section.")

    # --- code -------------------------------------------------------------------------------------
    code_test_timeout_s: float = Field(
        4.0, gt=0, le=120, description="Wall-clock limit per test (CPU limit = this + 1 s).")
    code_memory_mb: int = Field(
        1024, ge=64, le=65536, description="Address-space limit per sandboxed process (RLIMIT_AS) and "
        "resident-memory limit for the whole process tree of one test (psutil watchdog).")
    code_cpus: float = Field(
        1.5, gt=0, le=1024, description="CPU quota of one sandbox, in cores (its cgroup's cpu.max, or "
        "cfs_quota_us on cgroup v1, where the cpu controller can be used: 'cpu' in the isolation report): "
        "the program's threads and processes together get at most this much CPU per wall-clock second, "
        "so a parallel busy loop cannot starve the host. Each process's total is RLIMIT_CPU either way. "
        "Above 1: init, the program and an assert test's judge overlap, and at 1.0 the kernel throttled "
        "them (assert tests/s -15%; 1.5 measured as fast as no quota).")
    code_max_procs: int = Field(
        32, ge=1, le=4096, description="RLIMIT_NPROC for the sandbox's private uid: processes + "
        "threads a test may have at once (fork-bomb cap).")
    code_tmpfs_mb: int = Field(
        64, ge=1, le=8192, description="Size of the private tmpfs mounted as the sandbox's /tmp and "
        "working directory (when mount namespaces are available).")
    code_max_tests: int = Field(
        64, ge=1, le=10_000, description="Tests beyond this many in one spec are ignored (bounds one "
        "response's sandbox time, with code_max_timeouts and code_response_timeout_s).")
    code_max_chars: int = Field(
        100_000, ge=100, le=10_000_000, description="Longer extracted programs are rejected unrun.")
    code_all_or_nothing: bool = Field(
        False, description="False: reward = fraction of tests passed. True: 1 only if every test passes "
        "(and no test runs after one times out: the reward is decided).")
    code_max_timeouts: int = Field(
        2, ge=1, le=10_000, description="With the fraction reward: after this many of a response's tests time "
        "out, the rest are not run and count as timed out. A program that sleeps in every test would "
        "otherwise hold its group for code_max_tests timeouts (64 x 4 s at the defaults: a group of 16 "
        "on one worker, over an hour), long enough to go stale and escape its negative reward.")
    code_response_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Wall clock of all a response's tests together: once spent, the test "
        "running is stopped as timed out and the rest are not run (they count as timed out). A program that "
        "ends each test just inside code_test_timeout_s counts no timeout, so code_max_timeouts alone would let "
        "it hold the worker for code_max_tests x code_test_timeout_s (~250 s a response at the defaults); "
        "the default leaves 64 tests ~0.5 s each.")
    code_use_namespaces: bool = Field(
        True, description="Isolate each program in new network/mount/pid/ipc namespaces when the host "
        "allows it (root or unprivileged user namespaces). False only to exercise the fallback path.")
    max_output_bytes: int = Field(
        1 << 20, ge=1024, le=64 * 2**20, description="Cap on each test's stdout and on a call test's "
        "serialised return value (bytes); writes past it fail inside the sandbox (RLIMIT_FSIZE), so "
        "the host never buffers more (stderr keeps only its last 8 KiB). Worst-case host memory per "
        "response is a small multiple of code_max_tests * max_output_bytes (the raw bytes, a transient copy "
        "and the decoded text: ~2x measured for 8 x 1 MiB of control bytes).")
    code_hidden_paths: tuple[str, ...] = Field(
        (), description="Paths a sandboxed program must not see, beside the ones always hidden (this "
        "checkout: its datasets, run directories and world cache; $LAGRL_CACHE). The sandbox's root shows "
        "only /usr, /etc and the Python installation, so everything else (run directories, data_path files, "
        "caches) is hidden already; list data that lives inside those trees. Needs a mount namespace "
        "(SandboxResult.isolation has 'rootfs'); without one nothing is hidden.")
    code_data_sources: tuple[str, ...] = Field(
        ("code", "apps", "taco", "codecontests", "livecodebench", "leetcode", "humaneval", "mbpp"),
        description="data_source prefixes (case-insensitive) routed to the code reward; others are "
        "math unless the answer itself is a JSON test spec.")

    # --- worker pool ------------------------------------------------------------------------------
    num_workers: int | None = Field(
        None, ge=1, le=1024, description="RewardWorker actors in a RewardPool; None = the machine's "
        "CPU count.")
    worker_num_cpus: float = Field(
        0.25, gt=0, le=64, description="Ray CPUs reserved per RewardWorker (fractional: scoring is "
        "bursty and mostly waits on subprocesses).")

    def resolved_num_workers(self) -> int:
        return self.num_workers or max(1, os.cpu_count() or 1)

    @property
    def failure_reward(self) -> float:
        return -1.0 if self.signed_reward else 0.0
