"""Policy-lag accounting and importance-ratio statistics per optimizer update (DESIGN.md §3).

lag = v_learner - version_start of each response, at the moment of the optimizer update that
uses it (v_learner = number of optimizer updates applied so far). Reuse passes (N_SGD > 1)
and actor/learner asynchrony both show up as lag > 0. Every token of a response carries the
response's lag, so the token histogram weights each response by its length.

Ratio statistics compare learner and old (behaviour, unless recomputed) log-probs on the loss
tokens; like the loss they are divided by the global token count T so they add up over
micro-batches and ranks (``/max`` and ``/min`` keys reduce with max / min).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from learner.masked import masked_mean


@dataclass
class LagReport:
    """Lag histograms of one optimizer update (or several, via :meth:`merge`).

    Staleness (lag > max_lag) is decided when a group is admitted, before any update: what is
    too stale never reaches a report (the learner counts it as ``lag/stale_dropped``).
    """

    sample_hist: dict[int, int] = field(default_factory=dict)   # lag -> number of responses
    token_hist: dict[int, int] = field(default_factory=dict)    # lag -> number of loss tokens
    straddled: int = 0        # responses whose weights changed mid-generation (version_end > start)

    @property
    def samples(self) -> int:
        return sum(self.sample_hist.values())

    @property
    def tokens(self) -> int:
        return sum(self.token_hist.values())

    @property
    def max(self) -> int:
        return max(self.sample_hist, default=0)

    @property
    def mean(self) -> float:
        """Mean lag over responses."""
        return sum(k * n for k, n in self.sample_hist.items()) / max(self.samples, 1)

    @property
    def token_mean(self) -> float:
        """Mean lag over tokens (each response weighted by its length)."""
        return sum(k * n for k, n in self.token_hist.items()) / max(self.tokens, 1)

    def merge(self, other: LagReport) -> LagReport:
        """Histogram sum, e.g. over the N_SGD updates of one learner step."""
        def add(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
            return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(a.keys() | b.keys())}
        return LagReport(add(self.sample_hist, other.sample_hist), add(self.token_hist, other.token_hist),
                         self.straddled + other.straddled)

    def metrics(self) -> dict:
        """The ``lag/*`` metrics of a step. Histogram keys are strings, so a row reads the same from the
        buffer and from ``metrics.jsonl`` (JSON object keys are always strings)."""
        return {"lag/hist": {str(k): int(n) for k, n in sorted(self.sample_hist.items())},
                "lag/token_hist": {str(k): int(n) for k, n in sorted(self.token_hist.items())},
                "lag/mean": self.mean, "lag/token_mean": self.token_mean, "lag/max": float(self.max),
                "lag/samples": float(self.samples), "lag/tokens": float(self.tokens),
                "lag/straddled": float(self.straddled)}


def lag_report(
    learner_version: int,
    version_start: Tensor,             # (B,) int policy version that started each response
    tokens: Tensor,                    # (B,) loss-token counts, or (B, L) loss mask
    version_end: Tensor | None = None,  # (B,) int, for the straddle count
) -> LagReport:
    """lag_i = v_learner - version_start_i; histograms over responses and over their tokens.

    Raises on negative lag (a response from a future policy means corrupted versions).
    """
    version_start = version_start.long().reshape(-1)
    counts = (tokens.sum(dim=-1) if tokens.dim() == 2 else tokens).long().reshape(-1)   # (B,)
    if counts.shape != version_start.shape:
        raise ValueError(f"{version_start.numel()} versions vs {counts.numel()} token counts")
    lag = learner_version - version_start                                                 # (B,)
    if lag.numel() and int(lag.min()) < 0:
        raise ValueError(f"negative lag: version_start {int(version_start.max())} > learner "
                         f"version {learner_version}")
    sample_hist = {int(k): int(n) for k, n in zip(*torch.unique(lag, return_counts=True))}
    token_hist = {k: int(counts[lag == k].sum()) for k in sample_hist}
    straddled = 0 if version_end is None else int((version_end.long().reshape(-1) > version_start).sum())
    return LagReport(sample_hist, token_hist, straddled)


def ratio_stats(
    logprobs: Tensor,       # (B, L) learner log-probs
    old_logprobs: Tensor,   # (B, L) behaviour (or recomputed pi_old) log-probs
    advantages: Tensor,     # (B, L)
    mask: Tensor,           # (B, L) bool loss mask
    eps_low: float,
    eps_high: float,
    total_tokens: int | float | Tensor,
    prefix: str = "",
) -> dict[str, float]:
    """Importance ratio rho = exp(logp - logp_old) on loss tokens, each value sum/T:

    ratio/mean, ratio/max, ratio/min;
    clip/low_frac   rho < 1 - eps_low  and A < 0 (the clipped branch is active: zero gradient);
    clip/high_frac  rho > 1 + eps_high and A > 0;  clip/frac = their sum;
    ratio/below_band_frac, ratio/above_band_frac: rho outside the band, whatever the sign of A;
    mismatch/kl_k3  mean(rho - 1 - log rho): unbiased, >= 0 estimate of KL(pi_old || pi_learner)
                    on tokens sampled from pi_old (the primary mismatch number);
    mismatch/kl_k1  mean(logp_old - logp): unbiased, signed, noisier estimate of the same KL.
    """
    with torch.no_grad():
        mask = mask.bool()
        d = torch.where(mask, (logprobs - old_logprobs).to(torch.float64), 0.0)
        rho = d.exp()
        denom = torch.as_tensor(total_tokens, dtype=torch.float64, device=d.device).clamp(min=1)
        below, above = (rho < 1 - eps_low) & mask, (rho > 1 + eps_high) & mask
        low, high = below & (advantages < 0), above & (advantages > 0)
        empty = rho.numel() == 0
        vals = torch.stack([
            masked_mean(rho, mask, count=denom),
            d.new_tensor(float("-inf")) if empty else rho.masked_fill(~mask, float("-inf")).amax(),
            d.new_tensor(float("inf")) if empty else rho.masked_fill(~mask, float("inf")).amin(),
            low.sum() / denom, high.sum() / denom, (low | high).sum() / denom,
            below.sum() / denom, above.sum() / denom,
            masked_mean(rho - 1 - d, mask, count=denom),
            masked_mean(-d, mask, count=denom),
        ]).tolist()
    keys = ["ratio/mean", "ratio/max", "ratio/min", "clip/low_frac", "clip/high_frac", "clip/frac",
            "ratio/below_band_frac", "ratio/above_band_frac", "mismatch/kl_k3", "mismatch/kl_k1"]
    return {prefix + k: v for k, v in zip(keys, vals)}
