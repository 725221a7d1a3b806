"""The code sandbox: untrusted, model-written Python run against tests (DESIGN.md §7).

    runner.py    the worker's side and the threat model: run_code / run_tests, limits, results
    init.py      the launcher, started as ``python -I init.py``: it imports only the stdlib and psutil
                 and loads the parts below by path, so none of lagrl is on the program's sys.path
    fs.py        namespaces and the minimal read-only root       seccomp.py  the system-call filter
    cgroup.py    the per-sandbox memory / CPU cgroup              sockets.py  unix-socket buffer meter
    child.py     the untrusted side: one forked process per test
    judge.py     assert tests' judge process                      wire.py     its framed-JSON channel

The parts other than runner.py are stdlib-only (loaded by path inside the sandbox); they may also be
imported normally (``from rewards.sandbox import cgroup``), as the worker and the unit tests do.
"""

from rewards.sandbox.runner import (
    INIT_SCRIPT,
    CodeTest,
    SandboxLimits,
    SandboxResult,
    check_syntax,
    hidden_paths,
    isolation_report,
    run_code,
    run_tests,
    sweep_stale_cgroups,
)

__all__ = ["INIT_SCRIPT", "CodeTest", "SandboxLimits", "SandboxResult", "check_syntax", "hidden_paths",
           "isolation_report", "run_code", "run_tests", "sweep_stale_cgroups"]
