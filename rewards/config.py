"""RewardConfig: every knob of the verifiers, the code sandbox and the reward worker pool (DESIGN.md §7).

Typed, bounded and documented once; unknown keys fail loudly (a typo in a preset must not silently
fall back to a default). Defaults follow the Skywork-OR1 recipe (1/0 math reward, math-verify with a
timeout) and common code-RL practice (a few seconds and ~1 GiB per test).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewards.cpus import usable_cpus


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
        64, ge=1, le=10_000, description="Tests of one problem that are run (bounds one response's sandbox time, "
        "with code_max_timeouts and code_response_timeout_s). At load a spec with more is cut to its first this "
        "many (the rest would never run, yet would travel in every prompt and group message); the load prints "
        "how many problems were cut. TACO has problems with hundreds of tests; 64 keeps most whole.")
    code_max_test_bytes: int = Field(
        16 << 20, ge=1024, le=4 << 30, description="At load, a problem with a (kept) test whose input + expected "
        "output exceed this many UTF-8 bytes is refused like any bad row: the input is written into the "
        "sandbox's tmpfs (it must fit half of code_tmpfs_mb, the other half being the program's and its "
        "captured output's), and a larger one fails every test as 'sandbox setup failed'. 16 MiB keeps the "
        "multi-MB inputs of the largest TACO / CodeContests tests (a Codeforces maximum test is 1-10 MB) "
        "and refuses generated ones of tens of MB.")
    code_max_spec_bytes: int = Field(
        32 << 20, ge=1024, le=512 << 20, description="At load, a problem whose test spec (its JSON after the cut "
        "to code_max_tests) is larger is refused like any bad row. The spec travels in every prompt and group "
        "message through Redis (so it is also held to half of buffer.max_message_bytes: a group message carries "
        "it beside its responses; the buffer keeps ~retention_prompts + retention_groups of them), and the "
        "sandbox launcher holds all its inputs inside code_memory_mb. 32 MiB = 64 tests of 0.5 MB: an ordinary "
        "Skywork-OR1 / DeepCoder / TACO row is far below (KBs to a few MB); rows of tens of MB are pathological.")
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
    code_group_timeout_s: float = Field(
        240.0, gt=0, le=3600, description="Wall clock of all a group's responses together (they run one "
        "after another on one worker): each response's sandbox gets at most what is left of it, and once it "
        "is spent each response left gets 2 s for all its tests (rewards.code_reward.LATE_RESPONSE_S), like "
        "the math path's short timer: a response cut short is a timeout (a failure reward), never a dropped "
        "group, so slow programs cannot escape their reward. Without it a group of 16 could hold its worker "
        "for 16 x code_response_timeout_s (8 min); 240 s leaves a normal group of 16 ~15 s a response.")
    code_use_namespaces: bool = Field(
        True, description="Isolate each program in new network/mount/pid/ipc namespaces when the host "
        "allows it (root or unprivileged user namespaces). False only to exercise the fallback path.")
    code_isolation: Literal["strict", "weak"] = Field(
        "strict", description="'strict': code rewards start only where the sandbox has every wall it has "
        "as root (network, mount and private root, pid, ipc namespaces and the system-call filter; as an "
        "ordinary user through an unprivileged user namespace), checked once when the reward pool starts: "
        "elsewhere the run stops with an error naming what is missing. 'weak' accepts less (a host without "
        "user namespaces: the program then shares the user's identity and can signal the user's "
        "processes and read the user's files); the run records which isolation it had either way.")
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
        None, ge=1, le=1024, description="RewardWorker actors in a RewardPool; None = the CPUs this process "
        "may use (rewards.cpus.usable_cpus: its affinity and its cgroup's CPU quota, not the machine's count, "
        "which in a container overcounts and turns correct programs into wall-clock timeouts).")
    reward_call_grace_s: float = Field(
        120.0, gt=0, le=3600, description="How long a reward call may run past its budget (code_group_timeout_s "
        "per code group, math_group_timeout_s per math group) before its caller gives up: its groups are "
        "dead-lettered (reward_timeout) and the worker, hung, is killed and restarted. Counted from when the "
        "worker starts the call, not while it waits behind others. Covers what the budgets leave out: up to two "
        "verifier restarts (math_startup_timeout_s each) and the sandboxes' kill and clean-up.")
    worker_num_cpus: float = Field(
        0.25, gt=0, le=64, description="Ray CPUs reserved per RewardWorker (fractional: scoring is "
        "bursty and mostly waits on subprocesses).")

    @model_validator(mode="after")
    def _test_input_fits_the_sandbox(self) -> RewardConfig:
        if self.code_max_test_bytes > (self.code_tmpfs_mb << 20) // 2:
            raise ValueError(f"code_max_test_bytes={self.code_max_test_bytes} exceeds half of code_tmpfs_mb="
                             f"{self.code_tmpfs_mb} MiB: a test's input that large would leave the program no "
                             "room in the sandbox's tmpfs; lower code_max_test_bytes or raise code_tmpfs_mb")
        return self

    def resolved_num_workers(self) -> int:
        return self.num_workers or usable_cpus()

    @property
    def failure_reward(self) -> float:
        return -1.0 if self.signed_reward else 0.0
