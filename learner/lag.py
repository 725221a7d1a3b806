"""Policy-lag accounting and importance-ratio statistics per optimizer update (DESIGN.md §3).

Two lags, both reported per learner step:

* **update lag** (``lag/*``): lag = v_learner - version_start of each response at the moment of
  the optimizer update that uses it (v_learner = number of optimizer updates applied so far).
  Reuse passes (N_SGD > 1) and actor/learner asynchrony both show up in it; it is *the* lag of
  the recipe (DESIGN.md §3), and a response used by several updates counts once per update.
* **generation lag at the step's start** (``lag_start/*``): v0 - version_start, with v0 the
  version when the step starts; each trained response counts once. This is what admission
  bounds (``max_lag``): update lags reach up to max_lag + N_SGD - 1.

Every token of a response carries the response's lag, so the token histogram weights each
response by its length.

Ratio statistics compare learner and old (behaviour, unless recomputed) log-probs on the loss
tokens; like the loss they are divided by the global token count T so they add up over
micro-batches and ranks (``/max`` and ``/min`` keys reduce with max / min).

Per-lag-bucket statistics (:func:`lag_bucket_stats`): the same numbers restricted to the tokens
whose update lag falls in a bucket (0, 1, 2-3, 4-7, 8+), keys ``lagbucket/<bucket>/...``, plus the
bucket's token count ``lagbucket/<bucket>/tokens``. They follow the sum/T convention too, and
``learner.reduce.combine_updates`` turns them into means over the bucket's own tokens at the end
of the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from learner.masked import masked_mean, read_floats
from learner.reduce import BUCKET_PREFIX


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

    def metrics(self, prefix: str = "lag/") -> dict:
        """The ``lag/*`` metrics of a step (``prefix`` ``lag_start/`` for the step-start lags).
        Histogram keys are strings, so a row reads the same from the buffer and from
        ``metrics.jsonl`` (JSON object keys are always strings)."""
        return {f"{prefix}hist": {str(k): int(n) for k, n in sorted(self.sample_hist.items())},
                f"{prefix}token_hist": {str(k): int(n) for k, n in sorted(self.token_hist.items())},
                f"{prefix}mean": self.mean, f"{prefix}token_mean": self.token_mean, f"{prefix}max": float(self.max),
                f"{prefix}samples": float(self.samples), f"{prefix}tokens": float(self.tokens),
                f"{prefix}straddled": float(self.straddled)}


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


def ratio_stats(*args, **kwargs) -> dict[str, float]:
    """:func:`ratio_stat_values` (the same arguments), read."""
    return read_floats(ratio_stat_values(*args, **kwargs))


COV_MOMENTS = ("cov/logp_adv_xy", "cov/logp", "cov/adv")


def finish_covariance(step: dict[str, float]) -> dict[str, float]:
    """The step's moments (token means over all its updates, ``learner.reduce.combine_updates``; per lag
    bucket over the bucket's tokens) -> ``cov/logp_adv`` = mean(logp A) - mean(logp) mean(A), the covariance
    of the trained tokens' log-probs (current policy) and advantages, whole and per bucket, in place of the
    moments. To first order it drives a softmax policy's entropy change under a policy-gradient update
    (the change is about -lr x this covariance: Cui et al. 2025, "The Entropy Mechanism of RL for
    Reasoning LMs"), so it says why more updates per batch collapse entropy faster."""
    for key in [k for k in step if k.endswith(COV_MOMENTS[0])]:
        prefix = key[: -len(COV_MOMENTS[0])]
        xy, x, y = (step.pop(prefix + k, float("nan")) for k in COV_MOMENTS)
        step[prefix + "cov/logp_adv"] = xy - x * y
    return step


def ratio_stat_values(
    logprobs: Tensor,       # (B, L) learner log-probs
    old_logprobs: Tensor,   # (B, L) behaviour (or recomputed pi_old) log-probs
    advantages: Tensor,     # (B, L)
    mask: Tensor,           # (B, L) bool loss mask
    eps_low: float,
    eps_high: float,
    total_tokens: int | float | Tensor,
    prefix: str = "",
) -> dict[str, Tensor]:
    """Importance ratio rho = exp(logp - logp_old) on loss tokens, each value sum/T:

    ratio/mean, ratio/max, ratio/min;
    clip/low_frac   rho < 1 - eps_low  and A < 0 (the clipped branch is active: zero gradient);
    clip/high_frac  rho > 1 + eps_high and A > 0;  clip/frac = their sum;
    ratio/below_band_frac, ratio/above_band_frac: rho outside the band, whatever the sign of A;
    mismatch/kl_k3  mean(rho - 1 - log rho): unbiased, >= 0 estimate of KL(pi_old || pi_learner)
                    on tokens sampled from pi_old (the primary mismatch number);
    mismatch/kl_k1  mean(logp_old - logp): unbiased, signed, noisier estimate of the same KL.
    cov/logp_adv_xy, cov/logp, cov/adv: mean(logp * A), mean(logp), mean(A), the moments of the covariance
                    of the tokens' log-probs and advantages (:func:`finish_covariance` makes it, per step).

    0-d tensors, not read (:func:`learner.masked.read_floats` reads a micro-batch's metrics at once).
    """
    with torch.no_grad():
        mask = mask.bool()
        d = torch.where(mask, (logprobs - old_logprobs).to(torch.float64), 0.0)
        x = torch.where(mask, logprobs.to(torch.float64), 0.0)
        y = torch.where(mask, advantages.to(torch.float64), 0.0)
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
            (x * y).sum() / denom, x.sum() / denom, y.sum() / denom,
        ])
    keys = ["ratio/mean", "ratio/max", "ratio/min", "clip/low_frac", "clip/high_frac", "clip/frac",
            "ratio/below_band_frac", "ratio/above_band_frac", "mismatch/kl_k3", "mismatch/kl_k1", *COV_MOMENTS]
    return {prefix + k: v for k, v in zip(keys, vals.unbind())}


# ---------------------------------------------------------------- per-lag-bucket statistics
# (label, lowest lag, highest lag or None): update lag 0, 1, 2-3, 4-7, 8 and more
LAG_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("0", 0, 0), ("1", 1, 1), ("2-3", 2, 3), ("4-7", 4, 7), ("8+", 8, None))
# ratio_stats keys kept per bucket (the rest would only repeat the global row's)
_BUCKET_RATIO_KEYS = ("ratio/mean", "ratio/max", "clip/low_frac", "clip/high_frac", "mismatch/kl_k3", *COV_MOMENTS)


def lag_bucket(lag: int) -> str:
    """The label of the bucket holding update lag ``lag`` (>= 0)."""
    if lag < 0:
        raise ValueError(f"negative lag {lag}")
    return next(label for label, lo, hi in LAG_BUCKETS if lo <= lag and (hi is None or lag <= hi))


def lag_bucket_stats(*args, **kwargs) -> dict[str, float]:
    """:func:`lag_bucket_values` (the same arguments), read, without the buckets that hold no loss token."""
    return drop_empty_buckets(read_floats(lag_bucket_values(*args, **kwargs)))


def lag_bucket_values(
    logprobs: Tensor,       # (B, L) learner log-probs
    old_logprobs: Tensor,   # (B, L) pi_old log-probs (behaviour unless recomputed)
    advantages: Tensor,     # (B, L)
    mask: Tensor,           # (B, L) bool loss mask
    row_lag: Tensor,        # (B,) int update lag of each row (every token of a row shares it)
    eps_low: float,
    eps_high: float,
    total_tokens: int | float | Tensor,
    entropy: Tensor | None = None,   # (B, L) token entropies
    overall: dict[str, Tensor] | None = None,   # ratio_stat_values over the whole mask, if already computed
) -> dict[str, Tensor]:
    """Per bucket of update lag that a row of this micro-batch falls in, each value sum/T like ``ratio_stats``:

    lagbucket/<b>/tokens            number of loss tokens in the bucket (a count: adds up as is)
    lagbucket/<b>/entropy/mean      sum of the bucket's token entropies / T
    lagbucket/<b>/ratio/mean, /ratio/max, /clip/low_frac, /clip/high_frac, /mismatch/kl_k3
                                    as :func:`ratio_stats` on the bucket's tokens (ratio/max: a max)

    ``learner.reduce.combine_updates`` divides the summed values by the bucket's token count over
    the step, so the step's row holds means over the bucket's own tokens. 0-d tensors, not read: a
    bucket whose rows hold no loss token has tokens 0 here (:func:`drop_empty_buckets` removes it once
    read). The buckets present are found from ``row_lag`` on the host (the learner's is a CPU
    tensor); when one bucket holds every row its ratio statistics are ``overall``'s.
    """
    with torch.no_grad():
        mask = mask.bool()
        lags = set(row_lag.reshape(-1).tolist())
        present = [(label, lo, hi) for label, lo, hi in LAG_BUCKETS
                   if any(lo <= x and (hi is None or x <= hi) for x in lags)]
        lag = row_lag.to(mask.device).long().reshape(-1, 1).expand_as(mask)             # (B, L)
        whole = len(present) == 1               # one bucket holds every row: its tokens are the mask's
        out: dict[str, Tensor] = {}
        for label, lo, hi in present:
            in_bucket = mask if whole else mask & (lag >= lo) & (lag <= hi if hi is not None else True)   # (B, L)
            stats = overall if whole and overall is not None else ratio_stat_values(
                logprobs, old_logprobs, advantages, in_bucket, eps_low, eps_high, total_tokens)
            key = f"{BUCKET_PREFIX}{label}/"
            out[key + "tokens"] = in_bucket.sum()
            out |= {key + k: stats[k] for k in _BUCKET_RATIO_KEYS}
            if entropy is not None:
                out[key + "entropy/mean"] = masked_mean(entropy.detach().to(torch.float64), in_bucket,
                                                        count=total_tokens)
    return out


def drop_empty_buckets(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` without the keys of lag buckets whose token count is 0."""
    empty = tuple(k[:-len("tokens")] for k, v in metrics.items()
                  if k.startswith(BUCKET_PREFIX) and k.endswith("/tokens") and v == 0)
    return {k: v for k, v in metrics.items() if not k.startswith(empty)} if empty else metrics
