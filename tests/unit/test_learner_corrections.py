"""Behaviour-policy corrections in the policy loss: TIS, IcePop-style masking, decoupled PPO.

Every case builds tokens with pi_old = 1 (log 0), pi_theta = r and mu = 1/k, so the PPO ratio is
exactly r and the behaviour ratio pi_old / mu exactly k; the expected numbers are written out.
"""

import math

import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from learner.config import (
    CorrectionConfig,
    DecoupledPPO,
    MaskedIS,
    NoCorrection,
    PolicyLossConfig,
    TruncatedIS,
)
from learner.corrections import (
    behaviour_log_ratio,
    correction_weights,
    decoupled_weights,
    mask_weights,
    tis_weights,
)
from learner.loss import PolicyLossInputs, policy_loss
from learner.reduce import reduce_metrics
from learner.trainer_config import LearnerConfig


def _inputs(ratios, advantages, behaviour_ratios, **extra):
    """One row: log pi_old = 0, log pi_theta = log r (with grad), log mu = -log k."""
    logp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64, requires_grad=True)
    mu = torch.tensor([[-math.log(k) for k in behaviour_ratios]], dtype=torch.float64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logp, old_logprobs=torch.zeros_like(logp.detach()),
        advantages=torch.tensor([advantages], dtype=torch.float64),
        loss_mask=torch.ones_like(logp, dtype=torch.bool), behaviour_logprobs=mu, **extra)
    return logp, mu, inputs


def _cfg(correction, **kw):
    return PolicyLossConfig(correction=correction, **kw)


def _run(ratios, advantages, behaviour_ratios, correction, total_tokens=None, **kw):
    logp, mu, inputs = _inputs(ratios, advantages, behaviour_ratios)
    loss, m = policy_loss(inputs, _cfg(correction, **kw), total_tokens or len(ratios))
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), m, mu


# --- TIS ----------------------------------------------------------------------------------------

def test_tis_weights_loss_gradient_and_metrics():
    # C = 2, eps 0.2, T = 3.
    # t1 r 1.1 A +1 k 0.5: w 0.5, obj 1.1 (unclipped)  -> w obj  0.55,  d/dlogp = -w A r / T = -0.5*1.1/3
    # t2 r 1.0 A -1 k 3.0: w 2 (capped), obj -1         -> w obj -2,     d/dlogp = -2*(-1)/3 = +2/3
    # t3 r 0.9 A +1 k 1.5: w 1.5, obj 0.9               -> w obj  1.35,  d/dlogp = -1.5*0.9/3 = -0.45
    # loss = -(0.55 - 2 + 1.35) / 3 = 0.1 / 3
    loss, grad, m, mu = _run([1.1, 1.0, 0.9], [1.0, -1.0, 1.0], [0.5, 3.0, 1.5], TruncatedIS(cap=2.0))
    assert loss == pytest.approx(0.1 / 3)
    assert grad == pytest.approx([-0.55 / 3, 2 / 3, -0.45])
    assert mu.grad is None                                         # the weight is not differentiated
    assert m["correction/weight/mean"] == pytest.approx(4 / 3)     # (0.5 + 2 + 1.5) / 3
    assert m["correction/ratio/mean"] == pytest.approx(5 / 3)      # (0.5 + 3 + 1.5) / 3
    assert m["correction/ratio/max"] == pytest.approx(3.0) and m["correction/ratio/min"] == pytest.approx(0.5)
    assert m["correction/capped_frac"] == pytest.approx(1 / 3) and m["correction/masked_frac"] == 0.0
    # k3 = k - 1 - ln k: 0.193147 + 0.901388 + 0.094535 = 1.189070 -> / 3; k1 = mean(-ln k) = -0.810930 / 3
    assert m["mismatch/behaviour_kl_k3"] == pytest.approx(1.189070 / 3, abs=1e-6)
    assert m["mismatch/behaviour_kl_k1"] == pytest.approx(-0.810930 / 3, abs=1e-6)
    # The PPO-side statistics still compare pi_theta with pi_old (ratios 1.1, 1.0, 0.9).
    assert m["ratio/mean"] == pytest.approx(1.0) and m["ratio/max"] == pytest.approx(1.1)


def test_tis_cap_boundary():
    # k exactly C is not "capped"; just above is, and its weight is C.
    w = tis_weights(torch.tensor([[math.log(2.0), math.log(2.5)]], dtype=torch.float64),
                    torch.tensor([[True, True]]), TruncatedIS(cap=2.0))
    assert w.weight.tolist() == [[2.0, 2.0]] and w.capped.tolist() == [[False, True]]
    assert not w.masked.any()


# --- masking (IcePop) ---------------------------------------------------------------------------

def test_mask_band_edges_kept_outside_dropped_and_tokens_stay_in_T():
    # band [0.5, 2], weight_kept: w = k inside (edges included), 0 outside. T = 4 (all four tokens).
    # t1 k 0.5 (edge) r 1.0 A +1: w 0.5, obj  1 -> 0.5,  grad -0.5/4 = -0.125
    # t2 k 2.0 (edge) r 1.0 A -1: w 2,   obj -1 -> -2,   grad +2/4  = +0.5
    # t3 k 2.5 (out)  r 1.1 A +1: dropped -> 0, grad 0
    # t4 k 0.4 (out)  r 0.95 A -1: dropped -> 0, grad 0
    # loss = -(0.5 - 2) / 4 = 0.375 (divided by 4, not by the 2 kept tokens)
    loss, grad, m, _ = _run([1.0, 1.0, 1.1, 0.95], [1.0, -1.0, 1.0, -1.0], [0.5, 2.0, 2.5, 0.4],
                            MaskedIS(lower=0.5, upper=2.0))
    assert loss == pytest.approx(0.375)
    assert grad == pytest.approx([-0.125, 0.5, 0.0, 0.0]) and grad[2] == 0.0 and grad[3] == 0.0
    assert m["correction/masked_frac"] == pytest.approx(0.5) and m["correction/capped_frac"] == 0.0
    assert m["correction/weight/mean"] == pytest.approx(2.5 / 4)
    assert m["tokens/count"] == 4 and m["tokens/frac"] == 1.0


def test_mask_without_reweighting_is_pure_rejection():
    # weight_kept=False: kept tokens weigh 1: loss = -(1 - 1) / 4 = 0, grads -1/4 and +1/4.
    loss, grad, m, _ = _run([1.0, 1.0, 1.1, 0.95], [1.0, -1.0, 1.0, -1.0], [0.5, 2.0, 2.5, 0.4],
                            MaskedIS(lower=0.5, upper=2.0, weight_kept=False))
    assert loss == pytest.approx(0.0)
    assert grad == pytest.approx([-0.25, 0.25, 0.0, 0.0])
    assert m["correction/weight/mean"] == pytest.approx(0.5)


def test_masked_tokens_keep_entropy_and_kl_terms():
    # Only the pg term is masked: a dropped token (k = 10) still gets the entropy gradient -alpha/T.
    ent = torch.tensor([[1.0]], dtype=torch.float64, requires_grad=True)
    logp, _, inputs = _inputs([1.0], [1.0], [10.0], entropy=ent)
    loss, m = policy_loss(inputs, _cfg(MaskedIS()), total_tokens=1, entropy_coef=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(-0.1) and logp.grad.tolist() == [[0.0]]
    assert ent.grad.tolist() == [[-0.1]] and m["correction/masked_frac"] == 1.0


# --- decoupled PPO (AReaL) ----------------------------------------------------------------------

def test_decoupled_ppo_cap_drops_and_clip_uses_proximal_ratio():
    # eps_low 0.2, eps_high 0.28, cap 5, T = 3.
    # t1 r 1.3 A +1 k 4:    obj = min(1.3, 1.28) = 1.28 (clipped: no grad), w 4 -> 5.12
    # t2 r 1.0 A +1 k 6:    k > cap: dropped -> 0, grad 0
    # t3 r 1.1 A -1 k 0.25: obj -1.1, w 0.25 -> -0.275, grad -(0.25 * -1.1)/3 = +0.0916667
    # loss = -(5.12 - 0.275) / 3 = -1.615
    kw = dict(eps_low=0.2, eps_high=0.28)
    loss, grad, m, mu = _run([1.3, 1.0, 1.1], [1.0, 1.0, -1.0], [4.0, 6.0, 0.25], DecoupledPPO(cap=5.0), **kw)
    assert loss == pytest.approx(-1.615)
    assert grad == pytest.approx([0.0, 0.0, 0.275 / 3])
    assert mu.grad is None
    assert m["correction/masked_frac"] == pytest.approx(1 / 3) and m["clip/high_frac"] == pytest.approx(1 / 3)
    assert m["correction/weight/mean"] == pytest.approx(4.25 / 3)
    # cap None (the paper's uncapped weight): t2 weighs 6 -> loss -(5.12 + 6 - 0.275)/3, grad -6/3.
    loss, grad, m, _ = _run([1.3, 1.0, 1.1], [1.0, 1.0, -1.0], [4.0, 6.0, 0.25], DecoupledPPO(cap=None), **kw)
    assert loss == pytest.approx(-10.845 / 3)
    assert grad == pytest.approx([0.0, -2.0, 0.275 / 3])
    assert m["correction/masked_frac"] == 0.0


def test_decoupled_cap_boundary():
    mask = torch.tensor([[True, True, False]])
    log_k = torch.tensor([[math.log(4.0), math.log(4.0) + 1e-9, 0.0]], dtype=torch.float64)
    w = decoupled_weights(log_k, mask, DecoupledPPO(cap=4.0))
    assert w.weight.tolist() == [[4.0, 0.0, 0.0]] and w.masked.tolist() == [[False, True, False]]


def test_mask_rule_direct():
    log_k = torch.tensor([[math.log(0.5), math.log(0.5) - 1e-9, math.log(2.0), math.log(2.0) + 1e-9]],
                         dtype=torch.float64)
    w = mask_weights(log_k, torch.ones(1, 4, dtype=torch.bool), MaskedIS(lower=0.5, upper=2.0))
    assert w.masked.tolist() == [[False, True, False, True]]
    assert w.weight[0, 0].item() == 0.5 and w.weight[0, 2].item() == 2.0


# --- identity, plumbing, validation -------------------------------------------------------------

def _random_inputs(seed: int, behaviour: bool):
    g = torch.Generator().manual_seed(seed)
    shape = (3, 7)
    old = -torch.rand(shape, generator=g, dtype=torch.float64) * 3
    logp = (old + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = torch.rand(shape, generator=g) > 0.3
    mu = old + 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
    inputs = PolicyLossInputs(logp, old, torch.randn(3, generator=g, dtype=torch.float64), mask,
                              behaviour_logprobs=mu if behaviour else None)
    return logp, inputs


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_no_correction_is_bit_for_bit_unchanged(dual_clip):
    """correction='none' takes no new code path: behaviour log-probs only add metrics, and a
    correction whose weights are exactly 1 (mu == pi_old) gives the identical loss and gradient."""
    runs = []
    for behaviour, cfg in [(False, PolicyLossConfig(dual_clip=dual_clip)),
                           (True, PolicyLossConfig(dual_clip=dual_clip)),
                           (True, PolicyLossConfig(dual_clip=dual_clip, correction=TruncatedIS(cap=1.0))),
                           (True, PolicyLossConfig(dual_clip=dual_clip, correction=MaskedIS(weight_kept=False)))]:
        logp, inputs = _random_inputs(0, behaviour)
        if cfg.correction.type != "none":
            inputs.behaviour_logprobs = inputs.old_logprobs.clone()       # k = 1 exactly: w = 1
        loss, m = policy_loss(inputs, cfg, total_tokens=25)
        loss.backward()
        runs.append((loss.detach(), logp.grad.clone(), m))
    base_loss, base_grad, base_m = runs[0]
    for loss, grad, m in runs[1:]:
        assert torch.equal(loss, base_loss) and torch.equal(grad, base_grad)
        assert {k: v for k, v in m.items() if k in base_m} == base_m
    assert "mismatch/behaviour_kl_k3" not in base_m and "mismatch/behaviour_kl_k3" in runs[1][2]
    assert not any(k.startswith("correction/") for k in runs[1][2])
    assert runs[2][2]["correction/weight/mean"] == pytest.approx(runs[2][2]["tokens/frac"])


def test_split_into_micro_batches_adds_up():
    # Two micro-batches of one mask-corrected mini-batch, each divided by the same T_global = 4.
    whole = _run([1.0, 1.0, 1.1, 0.95], [1.0, -1.0, 1.0, -1.0], [0.5, 2.0, 2.5, 0.4], MaskedIS(), 4)
    a = _run([1.0, 1.0], [1.0, -1.0], [0.5, 2.0], MaskedIS(), 4)
    b = _run([1.1, 0.95], [1.0, -1.0], [2.5, 0.4], MaskedIS(), 4)
    assert a[0] + b[0] == pytest.approx(whole[0])
    merged = reduce_metrics([a[2], b[2]])
    for key in ("correction/masked_frac", "correction/weight/mean", "correction/ratio/mean",
                "correction/ratio/max", "correction/ratio/min", "mismatch/behaviour_kl_k3"):
        assert merged[key] == pytest.approx(whole[2][key]), key


def test_padding_garbage_in_behaviour_logprobs_never_leaks():
    logp = torch.tensor([[0.1, 0.0]], dtype=torch.float64, requires_grad=True)
    inputs = PolicyLossInputs(logp, torch.tensor([[0.0, float("nan")]], dtype=torch.float64),
                              torch.tensor([1.0]), torch.tensor([[True, False]]),
                              behaviour_logprobs=torch.tensor([[0.0, float("-inf")]], dtype=torch.float64))
    for corr in (TruncatedIS(), MaskedIS(), DecoupledPPO(cap=None)):
        logp.grad = None
        loss, m = policy_loss(inputs, _cfg(corr), total_tokens=1)
        loss.backward()
        assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0
        assert all(math.isfinite(v) for v in m.values()), m


def test_behaviour_log_ratio_is_detached_and_clamped():
    old = torch.tensor([[0.0, 0.0]], requires_grad=True)
    mu = torch.tensor([[-50.0, -1.0]], requires_grad=True)
    log_k = behaviour_log_ratio(old, mu, torch.tensor([[True, False]]))
    assert not log_k.requires_grad and log_k.tolist() == [[20.0, 0.0]]


def test_correction_needs_behaviour_logprobs_and_recompute():
    logp = torch.zeros(1, 1, requires_grad=True)
    inputs = PolicyLossInputs(logp, torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        policy_loss(inputs, _cfg(TruncatedIS()), 1)
    with pytest.raises(ValidationError, match="recompute"):
        LearnerConfig(loss=PolicyLossConfig(correction=TruncatedIS()))  # old_logprobs='behaviour'
    cfg = LearnerConfig(old_logprobs="recompute", loss=PolicyLossConfig(correction=MaskedIS()))
    with pytest.raises(ValidationError, match="recompute"):
        cfg.old_logprobs = "behaviour"                                   # validated on assignment
    with pytest.raises(ValueError, match="no weights"):
        correction_weights(torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool), NoCorrection())


@pytest.mark.parametrize("model, bad", [
    (TruncatedIS, {"cap": 0.9}), (MaskedIS, {"lower": 0.0}), (MaskedIS, {"upper": 0.9}),
    (MaskedIS, {"lower": 1.0, "upper": 1.0}), (DecoupledPPO, {"cap": 1.0}), (TruncatedIS, {"C": 2.0}),
])
def test_correction_config_bounds(model, bad):
    with pytest.raises(ValidationError):
        model(**bad)


def test_correction_configs_documented_and_tagged():
    adapter = TypeAdapter(CorrectionConfig)
    tags = {}
    for model in (NoCorrection, TruncatedIS, MaskedIS, DecoupledPPO):
        for name, f in model.model_fields.items():
            assert name == "type" or f.description, f"{model.__name__}.{name}"
        default = model()
        tags[default.type] = model
        # the tag selects the class, and the JSON form (what a preset or --learner.loss.correction writes) round-trips
        assert adapter.validate_json(default.model_dump_json()) == default
    assert set(tags) == {"none", "tis", "mask", "decoupled"}
    # on-policy data (pi_old = mu: log k = 0) passes every correction untouched: weight 1, nothing dropped
    mask = torch.tensor([[True, True, False]])
    for tag, model in tags.items():
        if tag == "none":
            continue
        w = correction_weights(torch.zeros(1, 3, dtype=torch.float64), mask, model())
        assert w.weight[mask].tolist() == [1.0, 1.0] and not w.masked.any(), tag
    parsed = TypeAdapter(CorrectionConfig).validate_python({"type": "mask", "upper": 5.0})
    assert isinstance(parsed, MaskedIS) and (parsed.lower, parsed.upper) == (0.5, 5.0)
    cfg = PolicyLossConfig.model_validate({"correction": {"type": "decoupled"}})
    assert cfg.correction == DecoupledPPO(cap=5.0)
    assert PolicyLossConfig().correction == NoCorrection()
    assert (TruncatedIS().cap, MaskedIS().lower, MaskedIS().upper) == (2.0, 0.5, 2.0)
