"""Entropy coefficient alpha_k for the loss term -alpha_k (1/T) sum H (DESIGN.md §4).

One small class per config variant, built from the tagged union by :func:`build_entropy_controller`.
All share the interface

    coef(current_entropy=None) -> alpha_k     before learner step k (constant during the step)
    update(entropy)                           after step k, with its mean token entropy e_k
    state_dict() / load_state_dict(state)     for checkpoints (restored with the weights)
    metrics() -> {"entropy/coef": ...}

Adaptive control (Skywork-OR1 report, "Adaptive Entropy Control"), k = learner step:

    c_0 = c_init
    c_{k+1} = clip(c_k + delta if e_k < target else c_k - delta, c_min, c_max)
    alpha_k = c_k * 1{e <= target}

Which entropy e the indicator reads (the report writes 1{e_k <= tgt}, with e_k the current
entropy; the released code sets the indicator from the entropy of the *previous* step, inside
the same update that moves c, and uses alpha = c before the first observation):

* ``indicator="previous_step"`` (default, released code): e = e_{k-1}, the last value given to
  update(); before the first update the indicator is 1 (so alpha_0 = c_init, 0 by default).
  The exact mean entropy of step k is only known after its forward passes, so this is the
  timing an asynchronous learner can honour without a second pass.
* ``indicator="current_batch"`` (report's formula): the learner passes an entropy of the batch
  it is about to train on to coef(), e.g. -mean(behaviour log-prob) of its tokens, the cheap
  estimate the released code used for e.

Call update() once per learner step (one rollout batch, N_SGD optimizer updates) with the
step's ``entropy/mean``: the token-weighted mean over its updates (``learner.reduce.combine_updates``).
A step that trained no token has no entropy (NaN in its row, never 0, which would read as a
collapse): pass None, and the controller keeps its state as if the step had not happened.

Differences from the released code, on purpose: the indicator is ``<=`` (brief/report) where
the code uses ``<``; e is the exact token-mean entropy of the full next-token distribution
(``entropy/mean``) where the code used -mean(log pi_old(y_t)) of the sampled tokens.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from learner.config import AdaptiveEntropy, EntropyConfig, FixedEntropy


class EntropyController(Protocol):
    def coef(self, current_entropy: float | None = None) -> float: ...
    def update(self, entropy: float | None) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def metrics(self) -> dict[str, float]: ...


class _Stateless:
    alpha = 0.0

    def coef(self, current_entropy: float | None = None) -> float:
        return self.alpha

    def update(self, entropy: float | None) -> None:
        if entropy is not None:
            _check_finite(entropy)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {"entropy/coef": self.coef()}


class NoEntropyControl(_Stateless):
    """alpha_k = 0."""


class FixedEntropyControl(_Stateless):
    """alpha_k = coef."""

    def __init__(self, cfg: FixedEntropy):
        self.alpha = cfg.coef


class AdaptiveEntropyControl:
    """Skywork-OR1 adaptive controller; see the module docstring for the exact timing."""

    def __init__(self, cfg: AdaptiveEntropy):
        self.cfg = cfg
        self.c = cfg.c_init
        self.last_entropy: float | None = None
        self.steps = 0

    def coef(self, current_entropy: float | None = None) -> float:
        """alpha_k = c_k * 1{e <= target} (e per ``cfg.indicator``)."""
        if self.cfg.indicator == "current_batch":
            if current_entropy is None:
                raise ValueError("indicator='current_batch': pass the batch's entropy to coef()")
            e = current_entropy
        else:
            e = self.last_entropy
        return self.c if e is None or e <= self.cfg.target else 0.0

    def update(self, entropy: float | None) -> None:
        """c <- clip(c + delta if e < target else c - delta, c_min, c_max); remember e.
        None (a step without trained tokens): no observation, nothing changes."""
        if entropy is None:
            return
        _check_finite(entropy)
        step = self.cfg.delta if entropy < self.cfg.target else -self.cfg.delta
        self.c = min(max(self.c + step, self.cfg.c_min), self.cfg.c_max)
        self.last_entropy = float(entropy)
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {"c": self.c, "last_entropy": self.last_entropy, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"c", "last_entropy", "steps"}:
            raise ValueError(f"adaptive entropy state needs c, last_entropy, steps; got {sorted(state)}")
        self.c = float(state["c"])
        self.last_entropy = None if state["last_entropy"] is None else float(state["last_entropy"])
        self.steps = int(state["steps"])

    def metrics(self) -> dict[str, float]:
        out = {"entropy/c": self.c, "entropy/target": self.cfg.target}   # the notebook draws the target
        if self.cfg.indicator == "previous_step":
            out["entropy/coef"] = self.coef()
        return out


def _check_finite(entropy: float) -> None:
    if not math.isfinite(entropy):
        raise ValueError(f"entropy must be finite, got {entropy}")


def build_entropy_controller(cfg: EntropyConfig) -> EntropyController:
    """Dispatch on the config's ``type`` discriminator."""
    builders = {"none": lambda _: NoEntropyControl(), "fixed": FixedEntropyControl,
                "adaptive": AdaptiveEntropyControl}
    return builders[cfg.type](cfg)
