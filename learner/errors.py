"""Errors the learner raises on purpose (so callers and tests can catch exactly these)."""


class PolicyLagError(RuntimeError):
    """Strict on-policy mode saw a token that would be trained at lag != 0 (DESIGN.md §3)."""


class StepInterrupted(Exception):
    """A stop was requested while a step waited for data (a SIGTERM of ``ray job stop``): nothing of the
    step was trained, and the groups it had read stay pending for the learner (a resumed run reads them)."""
