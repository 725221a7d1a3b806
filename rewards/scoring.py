"""score_group: one finished group in, one RewardResult per response out, in this process.

The single routing point for every caller (RewardWorker actors, the eval helper, tests): an explicit
`kind` wins; else a data source listed in RewardConfig.code_data_sources is code; else an answer
that is a JSON test spec is code; everything else is math. Never raises for a bad response or a bad
answer: those become reasons (bad_gold, no_box, timeout, ...), so a group always reaches the buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.code_reward import is_test_spec, may_be_test_spec, score_code_group
from rewards.config import RewardConfig
from rewards.math_reward import score_math_group
from rewards.math_verifier import MathVerifier
from rewards.result import Kind, RewardResult, ScoreRequest


def resolve_kind(answer: str, data_source: str = "", kind: Kind | None = None,
                 cfg: RewardConfig | None = None) -> Kind:
    if kind is not None:
        if kind not in ("math", "code"):
            raise ValueError(f"unknown reward kind {kind!r}")
        return kind
    cfg = cfg or RewardConfig()
    if _code_source(data_source, cfg):
        return "code"
    return "code" if is_test_spec(answer) else "math"


def may_run_code(answer: str, data_source: str = "", cfg: RewardConfig | None = None) -> bool:
    """Whether ``resolve_kind`` could route this group to the code sandbox, decided without parsing the
    answer (a test spec is a JSON object): such a group may take seconds to score, a math one
    milliseconds, so a caller batching groups into one call keeps it apart."""
    return _code_source(data_source, cfg or RewardConfig()) or may_be_test_spec(answer)


def _code_source(data_source: str, cfg: RewardConfig) -> bool:
    source = data_source.lower()
    return any(source.startswith(prefix.lower()) for prefix in cfg.code_data_sources)


def score_group(texts: Sequence[str], answer: str, data_source: str = "", cfg: RewardConfig | None = None,
                *, kind: Kind | None = None, verifier: MathVerifier | None = None) -> list[RewardResult]:
    """Score every response of one prompt. `verifier`: the math verifier to use (default: this process's)."""
    cfg = cfg or RewardConfig()
    if resolve_kind(answer, data_source, kind, cfg) == "code":
        return score_code_group(texts, answer, cfg)
    return score_math_group(texts, answer, cfg, verifier)


def score_request(req: ScoreRequest, cfg: RewardConfig | None = None,
                  verifier: MathVerifier | None = None) -> list[RewardResult]:
    return score_group(req.texts, req.answer, req.data_source, cfg, kind=req.kind, verifier=verifier)


def score_requests(requests: Sequence[ScoreRequest], cfg: RewardConfig | None = None,
                   verifier: MathVerifier | None = None) -> list[list[RewardResult] | Exception]:
    """Several groups; a group whose scoring raises (the reward system failing, never a bad answer) gets
    its exception in its place, so that group alone is dead-lettered, not the others scored with it."""
    out: list[list[RewardResult] | Exception] = []
    for req in requests:
        try:
            out.append(score_request(req, cfg, verifier))
        except Exception as exc:
            out.append(exc)
    return out
