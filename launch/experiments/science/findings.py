"""The findings the science report checks, each as paired arms that differ in one factor only.

Sources: Skywork-OR1 (He et al. 2025, arXiv:2505.22312, the "MAGIC" recipe and its ablations),
DAPO (Yu et al. 2025, arXiv:2503.14476). Every arm of one finding runs the same world, steps and
learning rate (the paper keeps lr fixed across its ablations); a world that needs a smaller lr
for its reuse arms to be stable gets it for every arm of the comparison, and the report says so.
``gpu_presets`` name the paper-scale presets of each arm, so the same command runs them on a
cluster (``python -m launch.experiments.science --full``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from launch.config.worlds import WORLDS
from launch.experiments.science.verdict import Expect


def science_worlds() -> tuple[str, ...]:
    """The worlds a finding may run in: the registry's entries with ``science=True`` (launch.config.worlds)."""
    return tuple(name for name, world in WORLDS.items() if world.science)


@dataclass(frozen=True)
class Arm:
    name: str
    preset: str
    overrides: tuple[str, ...] = ()          # extra CLI overrides, e.g. ("--learner.loss.eps_high", "0.4")
    skip_steps: int = 0                      # steps its statistics leave out (the lag finding's ramp-in)


@dataclass(frozen=True)
class Check:
    claim: str                               # one line: what the paper found
    statistic: str                           # a key of launch.experiments.science.verdict.STATISTICS
    a: str | None                            # arm name (the reference); None: stat(b) against 0
    b: str                                   # arm name compared with it
    expect: Expect                           # stat(b) - stat(a): expected sign; "differ": either sign;
                                             # "not_lower": above -NON_INFERIORITY_MARGIN (verdict.judge)
    paper: str = ""                          # what the paper reports: direction and size, in its terms


@dataclass(frozen=True)
class SlopeCheck:
    """A dose-response check: the sign of the slope of a statistic against a dose, or of its difference from
    the slope over another set of arms (``against``; launch.experiments.science.verdict.judge_slope)."""
    claim: str
    statistic: str                           # a key of launch.experiments.science.verdict.STATISTICS
    doses: tuple[tuple[str, float], ...]     # (arm name, its dose), e.g. (("lag 0", 0), ("lag 1", 1), ...)
    expect: Literal["higher", "lower"]       # expected sign of the slope (minus the reference slope)
    paper: str = ""                          # what the paper reports: direction and size, in its terms
    against: tuple[tuple[str, float], ...] = ()   # a reference dose curve: judge slope(doses) - slope(against)

    @property
    def a(self) -> str | None:               # a slope alone is judged against 0, like Check(a=None)
        return _slope_over(self.against) if self.against else None

    @property
    def b(self) -> str:
        return _slope_over(self.doses)


def _slope_over(doses: tuple[tuple[str, float], ...]) -> str:
    return "slope over " + ", ".join(name for name, _ in doses)


@dataclass(frozen=True)
class Finding:
    key: str
    title: str
    source: str
    world: str                               # its own world: one of science_worlds()
    arms: tuple[Arm, ...]
    checks: tuple[Check | SlopeCheck, ...]
    overrides: tuple[str, ...] = ()          # for every arm: lr, steps budget, eval
    notes: str = ""
    gpu: dict[str, str] = field(default_factory=dict)   # arm -> paper-scale preset
    final_model: bool = False                # in a world with an entropy_split its runs keep their final weights
                                             # and split their entropy (launch.config.worlds.WorldEntry)
    min_steps: int = 0                       # runs at least this long whatever --steps says: its effect needs them

    def __post_init__(self):
        if self.world not in science_worlds():
            raise ValueError(f"finding {self.key!r}: world {self.world!r} is not a science world; "
                             f"choose from {science_worlds()} (science=True in launch.config.worlds)")

    def steps_for(self, asked: int) -> int:
        """The learner steps its runs take when ``--steps asked`` is given."""
        return max(asked, self.min_steps)


def entropy_control_checks(adaptive: str, none: str, fixed: str) -> tuple[Check, ...]:
    """Skywork-OR1's entropy-loss ablation as three checks on the arms named."""
    return (Check("without an entropy term entropy ends lower than under adaptive control",
                  "probe_entropy_final", adaptive, none, "lower",
                  "lower: with no entropy term entropy collapses toward 0 while adaptive control holds it "
                  "near its 0.2 target (figures only)"),
            Check("a large fixed coefficient (1e-2) drives entropy above adaptive control's",
                  "probe_entropy_final", adaptive, fixed, "higher",
                  "higher: fixed coefficients of 5e-3 and 1e-2 make entropy blow up (figures only)"),
            Check("adaptive control ends closer to its target than no entropy term",
                  "entropy_target_gap", adaptive, none, "higher",
                  "higher: adaptive control keeps entropy near 0.2 (figures only)"))


LAG_DOSES = (0, 1, 2, 4, 8)
# Every dose is measured over the same steps, max(k)..end: a lag-k run trains at lag < k in its first k
# steps (the ramp-in), and a ratio over a longer window shows more decay, which would bias the slope.
LAG_ARMS = tuple(Arm(f"lag {k}", f"fixedlag_{k}", skip_steps=max(LAG_DOSES)) for k in LAG_DOSES)
ONPOLICY = Arm("on-policy (1, D, D)", "reuse1_dr64_dt64")
REUSE4 = Arm("reuse 4 (4, D, D/4)", "reuse4_dr64_dt16")              # off-policy, bounded lag: the control findings
NO_CONTROL = ("--learner.entropy.type", "none")
REUSE4_SYMMETRIC = Arm("reuse 4, eps_high 0.2", REUSE4.preset, ("--learner.entropy.type", "adaptive"))
# The updates-per-batch factorial: synchronous rollouts (learner.lag sync) in every arm but the on-policy
# baseline, which is the (1, D, D) corner of the same design; the symmetric clip everywhere.
MINIBATCHES = Arm("mini-batches (1, D, D/4)", "sync_reuse1_dr64_dt16")   # 4 updates a step from mini-batches
REUSE_ONLY = Arm("reuse (4, D, D)", "sync_reuse4_dr64_dt64")           # 4 updates a step from reuse
REUSE_MINIBATCHES = Arm("reuse and mini-batches (4, D, D/4)", "sync_reuse4_dr64_dt16")   # 16: the paper's arm
UPDATES_PER_BATCH = ((ONPOLICY, 1), (MINIBATCHES, 4), (REUSE_ONLY, 4), (REUSE_MINIBATCHES, 16))
DECOUPLED = ("--learner.old_logprobs", "recompute", "--learner.loss.correction.type", "decoupled")
LAG_DECOUPLED_ARMS = tuple(Arm(f"{a.name}, decoupled", a.preset, DECOUPLED, a.skip_steps) for a in LAG_ARMS)


def _dose_of(arms: tuple[Arm, ...]) -> tuple[tuple[str, float], ...]:
    return tuple((a.name, float(k)) for a, k in zip(arms, LAG_DOSES))


FINDINGS: tuple[Finding, ...] = (
    Finding(
        "reuse", "More updates per rollout batch collapse entropy faster, from reuse as from mini-batches",
        "Skywork-OR1 §4 (Figure: off-policy ablation, the (N_reuse, D_R, D_T) quadruples)",
        "slips", tuple(a for a, _ in UPDATES_PER_BATCH),
        (*(Check(f"{arm.name} ({n} updates per rollout batch) keeps less of its entropy than on-policy",
                 "probe_entropy_ratio", ONPOLICY.name, arm.name, "lower",
                 "lower: more SGD steps per rollout batch, from reuse as from mini-batches, collapse entropy "
                 "faster; (4, 64, 16) fastest (figures only)")
           for arm, n in UPDATES_PER_BATCH[1:]),
         SlopeCheck("the entropy ratio falls with log2 of the updates per rollout batch (1, 4, 4, 16)",
                    "probe_entropy_ratio", tuple((a.name, math.log2(n)) for a, n in UPDATES_PER_BATCH), "lower",
                    "lower, as a direction: N_SGD 1 < 4 < 16 collapse in that order (figures only)"),
         Check("at 4 updates per rollout batch, reuse and mini-batches keep different shares of their entropy",
               "probe_entropy_ratio", MINIBATCHES.name, REUSE_ONLY.name, "differ",
               "differ, or not: not compared in the paper, which sets each quadruple against on-policy"),
         Check("(4, D, D/4) ends with a lower held-out accuracy than on-policy", "accuracy_final", ONPOLICY.name,
               REUSE_MINIBATCHES.name, "lower",
               "lower: the off-policy runs' test accuracy ends below the on-policy run's (figures only)"),
         Check("(4, D, D/4) ends with a lower held-out pass@16 than on-policy (premature collapse)", "pass16_final",
               ONPOLICY.name, REUSE_MINIBATCHES.name, "lower",
               "lower: premature entropy collapse costs exploration and later accuracy (figures only; the paper "
               "reports avg@32, not pass@k)"),
         Check("(4, D, D/4) keeps less of its entropy on the decisions that change the reward (direction, form)",
               "decision_entropy_ratio", ONPOLICY.name, REUSE_MINIBATCHES.name, "lower",
               "lower: as the entropy ratio (the paper measures all tokens; in the routes world two thirds of "
               "the entropy sits in reward-idle check words and separators, which RL leaves alone)")),
        notes="One factor per comparison: every arm but on-policy runs synchronous rollouts (--learner.lag sync: "
              "a step's batch is sampled by the version the step starts at), so the only off-policyness is the "
              "within-step lag the arm's own updates create (0 .. N_SGD - 1), and every arm keeps the symmetric "
              "clip 0.2. Asynchrony is the lag finding's dose. The slope is fitted per seed against log2 of the "
              "updates (0, 2, 2, 4). In the slips world the best policy is deterministic: entropy collapse is the "
              "learning itself there, so premature collapse shows only as pass@16 at equal or higher pass@1.",
        gpu={a.name: a.preset for a, _ in UPDATES_PER_BATCH},
        final_model=True),
    Finding(
        "temperature", "A low sampling temperature collapses faster", "Skywork-OR1 §4 (temperature ablation)",
        "slips", (Arm("tau 1.0", "temp_1", NO_CONTROL), Arm("tau 0.6", "temp_0.6", NO_CONTROL),
                  Arm("tau 1.0, adaptive", "temp_1"), Arm("tau 0.6, adaptive", "temp_0.6")),
        (Check("tau 0.6 keeps less of the policy's own entropy (temperature 1) than tau 1.0, no entropy term",
               "probe_entropy_ratio", "tau 1.0", "tau 0.6", "lower",
               "lower: tau 0.6 starts with less entropy, gives a weaker learning signal and ends with lower "
               "test accuracy than tau 1.0 (figures only)"),
         Check("tau 0.6 ends with a lower held-out accuracy than tau 1.0, no entropy term", "accuracy_final",
               "tau 1.0", "tau 0.6", "lower", "lower: tau 0.6 ends with lower test accuracy (figures only)"),
         Check("tau 0.6 keeps less of the policy's own entropy than tau 1.0, adaptive control in both",
               "probe_entropy_ratio", "tau 1.0, adaptive", "tau 0.6, adaptive", "lower",
               "lower: as without the entropy term (the paper's runs use adaptive control)")),
        overrides=("--data.eval_temperature", "1.0"),
        notes="The policy's own entropy (the probe, temperature 1) in every arm: the learner-side entropy of a "
              "tau 0.6 arm is that of its tempered sampling distribution. The held-out accuracy is sampled at "
              "temperature 1 in every arm too (evaluated at its own 0.6, the tau 0.6 arm would be measured on a "
              "sharper distribution). The entropy term is off in the first pair (adaptive control acts on the "
              "learner-side entropy, so it would act in one arm only) and on in both arms of the second.",
        gpu={"tau 1.0": "temp_1 + --learner.entropy.type none", "tau 0.6": "temp_0.6 + --learner.entropy.type none",
             "tau 1.0, adaptive": "temp_1", "tau 0.6, adaptive": "temp_0.6"}),
    Finding(
        "clip_higher", "Clip-higher keeps entropy up; a large eps_high blows it up",
        "DAPO §3.1; Skywork-OR1 §4 (clip-higher ablation)", "slips",
        (Arm("eps_high 0.2", "cliphigh_0.2"), Arm("eps_high 0.28", "cliphigh_0.28"),
         Arm("eps_high 0.5", "cliphigh_0.28", ("--learner.loss.eps_high", "0.5"))),
        (Check("eps_high 0.28 keeps more entropy than 0.2", "probe_entropy_ratio", "eps_high 0.2", "eps_high 0.28",
               "higher",
               "higher: with eps_high 0.2 entropy falls fast; 0.28 keeps it up (DAPO Figure 2); in DAPO's "
               "ablation table clip-higher adds 2 points of AIME 2024 avg@32 (36 -> 38)"),
         Check("eps_high 0.5 raises entropy above 0.28's", "probe_entropy_ratio", "eps_high 0.28", "eps_high 0.5",
               "higher", "higher: a larger eps_high raises entropy, and too large a value lets it climb "
               "(figures only)")),
        gpu={"eps_high 0.2": "cliphigh_0.2", "eps_high 0.28": "cliphigh_0.28",
             "eps_high 0.5": "cliphigh_0.28 + --learner.loss.eps_high 0.5"}),
    Finding(
        "entropy_control", "Adaptive entropy control holds entropy near its target",
        "Skywork-OR1 §3 (adaptive entropy control) and its entropy-loss ablation", "slips",
        (Arm("adaptive", "entropy_adaptive"), Arm("none", "entropy_none"), Arm("fixed 1e-2", "entropy_fixed_0.01")),
        entropy_control_checks("adaptive", "none", "fixed 1e-2"),
        gpu={"adaptive": "entropy_adaptive", "none": "entropy_none", "fixed 1e-2": "entropy_fixed_0.01"}),
    Finding(
        "entropy_control_reuse", "Adaptive entropy control where entropy falls below its target",
        "Skywork-OR1 §3 (adaptive entropy control) and its entropy-loss ablation", "slips",
        # In 20 steps no arm of `entropy_control` gets to the 0.2 target, so the controller never acts; the
        # slips world under reuse-4 falls through it (0.32 -> 0.17 in 40 steps), so here it has to.
        tuple(Arm(name, REUSE4.preset, ("--learner.entropy.type", *rule)) for name, rule in (
            ("reuse 4, adaptive", ("adaptive",)), ("reuse 4, none", ("none",)),
            ("reuse 4, fixed 1e-2", ("fixed", "--learner.entropy.coef", "0.01")))),
        entropy_control_checks("reuse 4, adaptive", "reuse 4, none", "reuse 4, fixed 1e-2"),
        notes="Every arm is reuse-4 (16 updates per rollout batch) in the slips world, whose entropy falls "
              "below the 0.2 target between steps 16 and 31; only the entropy rule differs. At least 40 steps, "
              "so the control acts for the last 10-24. The adaptive arm steps its coefficient by the released "
              "scripts' delta 1e-4; the report's text says 5e-3, a pair the paper does not compare, so it is "
              "not an arm here (5 seeds of a 40-step reuse-4 arm cost 25 min): --override "
              "learner.entropy.delta=0.005 runs the finding with the text's.",
        min_steps=40,
        gpu={"reuse 4, adaptive": "reuse4_dr64_dt16", "reuse 4, none": "reuse4_dr64_dt16 + --learner.entropy.type none",
             "reuse 4, fixed 1e-2": "reuse4_dr64_dt16 + --learner.entropy.type fixed --learner.entropy.coef 0.01"}),
    Finding(
        "clip_higher_reuse", "Clip-higher where the clip binds: under reuse-4",
        "DAPO §3.1 (clip-higher); Skywork-OR1 §4", "slips",
        # the symmetric arm is entropy_control_reuse's adaptive arm, the same overrides: one set of runs
        (REUSE4_SYMMETRIC, Arm("reuse 4, eps_high 0.28", REUSE4.preset,
                               (*REUSE4_SYMMETRIC.overrides, "--learner.loss.eps_high", "0.28"))),
        (Check("under reuse-4 eps_high 0.28 keeps more entropy than 0.2", "probe_entropy_ratio",
               "reuse 4, eps_high 0.2", "reuse 4, eps_high 0.28", "higher",
               "higher: with eps_high 0.2 entropy falls fast; 0.28 keeps it up (DAPO Figure 2, trained with "
               "16 gradient updates per rollout: 512 prompts x 16 responses, mini-batches of 512)"),
         Check("under reuse-4 eps_high 0.28 ends with a higher held-out accuracy", "accuracy_final",
               "reuse 4, eps_high 0.2", "reuse 4, eps_high 0.28", "higher",
               "higher: clip-higher adds 2 points of AIME 2024 avg@32 in DAPO's ablation table (36 -> 38)")),
        notes="The clip_higher finding's runs take one update a step and their importance ratio stays inside "
              "the clip band (clip fraction 0.002): eps_high is never reached. Here 16 updates a step move it "
              "out: at eps 0.2, 0.6-1.0% of the tokens hit the upper clip over the last 8 steps (5 seeds). "
              "40 steps, as entropy_control_reuse, whose adaptive arm is this finding's eps_high 0.2 arm.",
        min_steps=40,
        gpu={"reuse 4, eps_high 0.2": "reuse4_dr64_dt16",
             "reuse 4, eps_high 0.28": "reuse4_dr64_dt16 + --learner.loss.eps_high 0.28"}),
    Finding(
        "lag", "Entropy and accuracy against lag as a controlled dose, without and with the decoupled correction",
        "Skywork-OR1 §4 (off-policy updates speed up entropy collapse), measured here as a dose: every token "
        "trained at update lag exactly k; AReaL (Fu et al. 2025, arXiv:2505.24298) for the decoupled objective",
        "slips", LAG_ARMS + LAG_DECOUPLED_ARMS,
        (SlopeCheck("entropy ratio falls as the lag k grows (0, 1, 2, 4, 8)", "probe_entropy_ratio",
                    _dose_of(LAG_ARMS), "lower",
                    "lower, as a direction only: the paper compares off- with on-policy updates and reports "
                    "no dose-response"),
         SlopeCheck("accuracy at the end falls as the lag k grows", "accuracy_final", _dose_of(LAG_ARMS), "lower",
                    "lower, as a direction only: off-policy runs end with lower test accuracy; no dose given"),
         SlopeCheck("the decoupled objective flattens the accuracy slope (its slope minus plain PPO's is higher)",
                    "accuracy_final", _dose_of(LAG_DECOUPLED_ARMS), "higher",
                    "higher: AReaL's AIME24 at staleness 0/1/2/4/8 is 42.0/41.8/40.0/23.3/35.7 with naive PPO "
                    "and 42.0/42.1/41.8/42.2/41.0 with the decoupled objective", against=_dose_of(LAG_ARMS)),
         SlopeCheck("with the decoupled objective the entropy ratio still falls as the lag k grows",
                    "probe_entropy_ratio", _dose_of(LAG_DECOUPLED_ARMS), "lower",
                    "lower, as a direction: AReaL measures accuracy only; no one has drawn the entropy dose "
                    "under the correction")),
        notes="Each dose is the baseline with --learner.lag fixed:k (one update per step, the same lr). A "
              "lag-k run's first k steps train at lag < k (no version k behind version 0), so every dose is "
              "measured over the same steps, from the largest k (8) on: equal windows, one factor apart. The "
              "second curve repeats every dose with the decoupled objective (AReaL): old log-probs recomputed by "
              "the learner (pi_prox), the clip around them and the importance weight pi_prox / mu (capped).",
        gpu={a.name: a.preset + (" + " + " ".join(a.overrides) if a.overrides else "")
             for a in LAG_ARMS + LAG_DECOUPLED_ARMS}),
    Finding(
        "multistage", "Multi-stage context lengthening reaches the long budget's accuracy with fewer tokens",
        "Skywork-OR1 §3 (multi-stage training)", "reasoning",
        (Arm("fixed final budget", "multistage", ("--data.stages", '[{"max_tokens": 256}]')),
         Arm("64 -> 128 -> 256", "multistage")),
        (Check("the staged run generates fewer tokens than the final budget from step 0", "tokens_total",
               "fixed final budget", "64 -> 128 -> 256", "lower",
               "lower: staged training (8K -> 16K -> 32K) reaches the accuracy at less compute (figures only)"),
         Check("the staged run's final accuracy is not lower than the final budget's (margin 0.05)",
               "accuracy_final", "fixed final budget", "64 -> 128 -> 256", "not_lower",
               "not lower: the staged run reaches the single long-context run's accuracy (figures only)"),
         Check("responses that fit their budget lengthen over the staged run", "uncut_length_growth",
               None, "64 -> 128 -> 256", "higher",
               "higher: responses lengthen at each stage's larger context (figures only)"),
         Check("the truncation rate drops when a stage starts", "truncation_drop_at_stage_starts",
               None, "64 -> 128 -> 256", "higher",
               "higher: the truncation ratio falls at each stage start (figures only)")),
        notes="The control is the paper's: the final budget (256) from step 0, not a short fixed budget (62% of "
              "the warmed-up policy's responses are cut at 64, so against 64 a raised cap lengthens responses "
              "whether or not anything is learned). Length is measured on uncut responses only (a cut response's "
              "length is the cap's); tokens are every response read by the learner, summed over the run.",
        gpu={"fixed final budget": "multistage + --data.stages [{max_tokens: 32768}]", "64 -> 128 -> 256": "multistage"}),
    Finding(
        "truncation_mask", "Advantage masks for truncated responses change length growth",
        "Skywork-OR1 §4 (advantage-mask ablation)", "reasoning",
        (Arm("mask none", "baseline"), Arm("mask before", "baseline", ("--learner.advantage.truncation_mask", "before")),
         Arm("mask after", "baseline", ("--learner.advantage.truncation_mask", "after"))),
        (Check("masking truncated responses before the statistics lets responses grow more",
               "length_growth", "mask none", "mask before", "higher",
               "higher, as a direction: a masked truncated response no longer pushes length down; the "
               "paper reports no accuracy gain from the masks (figures only)"),
         Check("masking them after the statistics lets responses grow more",
               "length_growth", "mask none", "mask after", "higher",
               "higher: as 'before' (figures only)")),
        gpu={"mask none": "baseline", "mask before": "baseline + --learner.advantage.truncation_mask before",
             "mask after": "baseline + --learner.advantage.truncation_mask after"}),
)


def finding(key: str) -> Finding:
    for f in FINDINGS:
        if f.key == key:
            return f
    raise KeyError(f"unknown finding {key!r}; choose from {[f.key for f in FINDINGS]}")
