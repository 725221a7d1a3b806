"""The run's lag policy (DESIGN.md §3): one tagged union, stated once (``--learner.lag``), checked once.

    on_policy   strict on-policy: every token trained at lag 0. N_reuse 1 and D_T = D_R (one update
                per rollout batch), weights published once per step, a symmetric clip (eps_low =
                eps_high), no lag guard; a token of another lag is a bug (PolicyLagError).
    bounded:N   off-policy: the generation lag at a step's start (v0 - version_start, ``lag_start/*``)
                is at most N >= 1; admission drops, counts and dead-letters staler responses. N_reuse >= 1,
                D_T <= D_R, clip-higher allowed. N does not bound the update lag (``lag/*``, the lag at
                each optimizer update), which reaches N + N_SGD - 1 (reuse-4, D_R/D_T 4, bounded:16: 31).
    sync        synchronous rollouts with any number of updates per step: the batch of step s is sampled
                by the version the step starts at (generation lag 0 at the step's start, the feeder issues
                it only once that version is published; an earlier step's late surplus is dropped and
                counted, as bounded:N's stale data), then trained by N_SGD = N_reuse * D_R / D_T updates,
                whose update lags are 0 .. N_SGD - 1: the only off-policyness is the one the step's own
                updates create. Clip-higher allowed. The updates-per-batch comparisons run in it, so
                reuse and mini-batches are not confounded with asynchrony (asynchrony is fixed:k's dose).
    fixed:k     lag as a controlled dose: every trained token at update lag exactly k. Actors generate
                step s with version s - k (the weight transport keeps the last k + 1 versions; only the
                Ray object store can), one update per step, weights published once per step, no guard.
                ``fixed:0`` is accepted and *is* strict on-policy (every on_policy rule applies, lag 0
                is checked at every update); it differs from ``on_policy`` only in naming the dose, so
                a sweep over k reads its zero arm like the others (``fixed_lag`` 0, not None).

On input a policy is a string (``--learner.lag fixed:4``, ``--learner.lag sync``; ``"bounded:16"`` in JSON) or the member itself
(``{"kind": "fixed", "k": 4}``), which is how config.json saves it. What each kind asks of the rest of
the learner config is :func:`lag_problems`, the one check; LearnerConfig raises every problem at once
(:func:`lag_error`).

Older configs stated the lag as three fields: ``mode`` (on_policy / off_policy), ``max_lag`` and
``fixed_lag``. For one release they are still read, in a preset, a ``--learner.mode`` override or a saved
config.json (:func:`fold_legacy_keys`), and read back from a dumped config dict of either age
(:func:`lag_fields`); LearnerConfig keeps ``mode``, ``max_lag`` and ``fixed_lag`` as read-only properties.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

from learner.config import BatchConfig, GuardConfig, PolicyLossConfig

ModeName = Literal["on_policy", "off_policy"]
LEGACY_KEYS = ("mode", "max_lag", "fixed_lag")
FORMS = "on_policy, sync, bounded:N (N >= 1) or fixed:k (k >= 0)"


class _Lag(BaseModel):
    """A member's ``max_lag`` bounds the generation lag at a step's start (admission, the feeder's clock)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def strict(self) -> bool:
        """Every trained token at lag 0 (on_policy, fixed:0)."""
        return self.max_lag == 0

    @property
    def mode(self) -> ModeName:
        return "on_policy" if self.strict else "off_policy"

    @property
    def fixed_lag(self) -> int | None:
        return None


class OnPolicy(_Lag):
    """Strict on-policy: every token at lag 0 (module docstring)."""

    kind: Literal["on_policy"] = "on_policy"

    @property
    def max_lag(self) -> int:
        return 0

    def __str__(self) -> str:
        return "on_policy"


class Bounded(_Lag):
    """Off-policy with the generation lag at a step's start bounded (module docstring)."""

    kind: Literal["bounded"] = "bounded"
    max_lag: int = Field(ge=1, description="Bound on the generation lag at the start of a step (v0 - "
                         "version_start, reported as lag_start/*): staler responses are dropped, counted and "
                         "dead-lettered with reason 'stale'. It does not bound the update lag (lag/*, the lag at "
                         "each optimizer update), which reaches max_lag + N_SGD - 1.")

    def __str__(self) -> str:
        return f"bounded:{self.max_lag}"


class Sync(_Lag):
    """Synchronous rollouts, any number of updates per step (module docstring)."""

    kind: Literal["sync"] = "sync"

    @property
    def max_lag(self) -> int:
        return 0

    @property
    def strict(self) -> bool:
        return False             # generation lag 0, but the step's own updates train at lags 0 .. N_SGD - 1

    def __str__(self) -> str:
        return "sync"


class Fixed(_Lag):
    """Every trained token at update lag exactly k; k = 0 is strict on-policy (module docstring)."""

    kind: Literal["fixed"] = "fixed"
    k: int = Field(ge=0, description="The one update lag of every trained token (less during the ramp-in, "
                   "buffer.versions.fixed_lag_required).")

    @property
    def max_lag(self) -> int:
        return self.k

    @property
    def fixed_lag(self) -> int | None:
        return self.k

    def __str__(self) -> str:
        return f"fixed:{self.k}"


def parse_lag(value: Any) -> Any:
    """``"on_policy"`` / ``"bounded:N"`` / ``"fixed:k"`` -> the member's dict; anything else unchanged."""
    if not isinstance(value, str):
        return value
    kind, colon, arg = value.strip().partition(":")
    if kind in ("on_policy", "sync") and not colon:
        return {"kind": kind}
    if kind in ("bounded", "fixed") and colon:
        try:
            n = int(arg)
        except ValueError:
            n = None
        if kind == "bounded" and n is not None and n < 1:
            raise ValueError(f"lag {value!r}: bounded needs N >= 1 (lag 0 is --learner.lag on_policy)")
        if n is not None:
            return {"kind": kind, ("max_lag" if kind == "bounded" else "k"): n}
    raise ValueError(f"lag {value!r}: write {FORMS}")


LagPolicy = Annotated[Union[OnPolicy, Sync, Bounded, Fixed], Field(discriminator="kind"), BeforeValidator(parse_lag)]
_ADAPTER: TypeAdapter = TypeAdapter(LagPolicy)


def lag_from(value: Any) -> OnPolicy | Sync | Bounded | Fixed:
    """A lag policy from any of its input forms (string, dict, member)."""
    return _ADAPTER.validate_python(value)


# --- the one check -----------------------------------------------------------------------------------
def lag_problems(lag: OnPolicy | Sync | Bounded | Fixed, batch: BatchConfig, loss: PolicyLossConfig,
                 sync_interval: int | None, guard: GuardConfig) -> list[str]:
    """Why a learner config with these fields cannot train with ``lag``, or [] (each item names its fix).

    on_policy and fixed:0 (strict): N_reuse 1, D_T = D_R, a symmetric clip (the value is the loss's
    choice, the symmetry the mode's), weights published once per step, no guard. fixed:k >= 1: one
    update per step (so the step's data is not reused at k + 1, k + 2, ...), weights published once per
    step, no guard (it would switch the lag). bounded:N and sync: nothing more (N >= 1 by its type; sync
    takes any batch, and its guard falls back to strict on-policy as bounded:N's does).
    """
    b, problems = batch, []
    if isinstance(lag, (Bounded, Sync)):
        return problems
    if lag.strict:
        if b.n_reuse != 1:
            problems.append(f"n_reuse={b.n_reuse} (need 1: --learner.batch.n_reuse 1)")
        if b.mini_batch != b.rollout_batch:
            problems.append(f"mini_batch={b.mini_batch} != rollout_batch={b.rollout_batch} (one update per step: "
                            f"--learner.batch.mini_batch {b.rollout_batch})")
        if loss.eps_low != loss.eps_high:
            problems.append(f"eps_low={loss.eps_low} != eps_high={loss.eps_high} (a symmetric clip)")
    elif b.n_reuse != 1 or b.mini_batch != b.rollout_batch:
        problems.append(f"needs one update per step: --learner.batch.n_reuse 1 and --learner.batch.mini_batch "
                        f"{b.rollout_batch} (= rollout_batch; got n_reuse {b.n_reuse}, mini_batch {b.mini_batch})")
    if sync_interval not in (None, 1):
        problems.append(f"sync_interval={sync_interval} (need None or 1: weights are published once per step, "
                        "so actors generate batch s with the version its lag names)")
    if guard.enabled:
        problems.append("guard.enabled watches an off-policy run to fall back to on-policy: "
                        + ("this run is on-policy already" if isinstance(lag, OnPolicy)
                           else "it would switch the lag itself") + " (turn --learner.guard.enabled off)")
    return problems


def lag_error(lag: OnPolicy | Sync | Bounded | Fixed, *config) -> str | None:
    """The one error listing every :func:`lag_problems` (same arguments), or None when there are none."""
    problems = lag_problems(lag, *config)
    if not problems:
        return None
    what = "strict on-policy" if lag.strict else f"every token at update lag exactly {lag.fixed_lag}"
    return f"--learner.lag {lag} ({what}): " + "; ".join(problems)


# --- the old keys: mode / max_lag / fixed_lag, for one release -------------------------------------
def fold_legacy_keys(data: Any) -> Any:
    """LearnerConfig input with the old keys folded into ``lag``; other input unchanged.

    The old keys replace the matching part of the ``lag`` given beside them (an override such as
    ``--learner.max_lag 4`` lands next to the preset's dumped ``lag``), or of on_policy when there is
    none (an old preset or config.json). A ``fixed_lag`` k given without ``mode`` / ``max_lag`` brings
    the ones k needs. The resulting three must describe one policy; if they do not, the error names
    ``--learner.lag``.
    """
    if not isinstance(data, Mapping) or not any(k in data for k in LEGACY_KEYS):
        return data
    given = {k: data[k] for k in LEGACY_KEYS if k in data}
    rest = {k: v for k, v in data.items() if k not in LEGACY_KEYS}
    base = lag_from(rest["lag"]) if "lag" in rest else None
    fields = {"mode": "on_policy", "max_lag": 0, "fixed_lag": None} if base is None else \
        {"mode": base.mode, "max_lag": base.max_lag, "fixed_lag": base.fixed_lag}

    def refuse(why: str) -> ValueError:
        stated = ", ".join(f"{key}={val!r}" for key, val in given.items())
        beside = f" beside lag {base}" if base is not None else ""
        return ValueError(f"{stated}{beside}: {why}. The lag is one setting now: --learner.lag {FORMS} "
                          "(mode / max_lag / fixed_lag are read for one more release)")

    for key in ("max_lag", "fixed_lag"):
        val = given.get(key, 0)
        if (val is not None or key == "max_lag") and (not isinstance(val, int) or isinstance(val, bool) or val < 0):
            raise refuse(f"{key} must be an integer >= 0")
    if given.get("mode", "on_policy") not in ("on_policy", "off_policy"):
        raise refuse("mode is 'on_policy' or 'off_policy'")
    k = given.get("fixed_lag")
    if k is not None:                       # a fixed lag k brings the mode and bound it needs
        fields.update(mode="on_policy" if k == 0 else "off_policy", max_lag=k)
    fields.update(given)
    rest["lag"] = _lag_of(**fields, refuse=refuse)
    return rest


def _lag_of(mode: str, max_lag: int, fixed_lag: int | None, refuse) -> OnPolicy | Bounded | Fixed:
    """The one policy the old three fields describe, or ``refuse(why)`` when they contradict each other."""
    k = fixed_lag
    if k is not None:
        if k == 0 and (mode, max_lag) != ("on_policy", 0):
            raise refuse("fixed lag 0 is strict on-policy (mode on_policy, max_lag 0): --learner.lag fixed:0")
        if k > 0 and (mode, max_lag) != ("off_policy", k):
            raise refuse(f"fixed lag {k} needs mode off_policy with max_lag {k}: --learner.lag fixed:{k}")
        return Fixed(k=k)
    if mode == "on_policy":
        if max_lag != 0:
            raise refuse(f"on-policy is lag 0 (--learner.lag on_policy); a bound of {max_lag} is "
                         f"--learner.lag bounded:{max_lag}")
        return OnPolicy()
    if max_lag < 1:
        raise refuse("off-policy needs max_lag >= 1 (--learner.lag bounded:N; lag 0 is --learner.lag on_policy)")
    return Bounded(max_lag=max_lag)


def lag_fields(learner: Mapping) -> dict[str, Any]:
    """``{"lag", "mode", "max_lag", "fixed_lag"}`` of a dumped learner config dict of either age: one with
    ``lag`` (config.json, the run's meta from this release on) or one with the old keys (before it)."""
    lag = lag_from(fold_legacy_keys(dict(learner)).get("lag", "on_policy"))
    return {"lag": str(lag), "mode": lag.mode, "max_lag": lag.max_lag, "fixed_lag": lag.fixed_lag}
