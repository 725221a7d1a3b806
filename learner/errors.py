"""Errors the learner raises on purpose (so callers and tests can catch exactly these)."""


class PolicyLagError(RuntimeError):
    """Strict on-policy mode saw a token that would be trained at lag != 0 (DESIGN.md §3)."""
