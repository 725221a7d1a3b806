"""The findings the science report checks, each as paired arms that differ in one factor only.

Sources: Skywork-OR1 (He et al. 2025, arXiv:2505.22312, the "MAGIC" recipe and its ablations),
DAPO (Yu et al. 2025, arXiv:2503.14476). Every arm of one finding runs the same world, steps and
learning rate (the paper keeps lr fixed across its ablations); a world that needs a smaller lr
for its reuse arms to be stable gets it for every arm of the comparison, and the report says so.
``gpu_presets`` name the paper-scale presets of each arm, so the same command runs them on a
cluster (``python -m launch.experiments.science --full``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from launch.config.worlds import WORLDS


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
    expect: Literal["higher", "lower"]       # expected sign of stat(b) - stat(a)
    paper: str = ""                          # what the paper reports: direction and size, in its terms


@dataclass(frozen=True)
class SlopeCheck:
    """A dose-response check: the sign of the slope of a statistic against a dose (launch.experiments.science.verdict.judge_slope)."""
    claim: str
    statistic: str                           # a key of launch.experiments.science.verdict.STATISTICS
    doses: tuple[tuple[str, float], ...]     # (arm name, its dose), e.g. (("lag 0", 0), ("lag 1", 1), ...)
    expect: Literal["higher", "lower"]       # expected sign of the slope
    paper: str = ""                          # what the paper reports: direction and size, in its terms

    @property
    def a(self) -> None:                     # a slope is judged against 0, like Check(a=None)
        return None

    @property
    def b(self) -> str:
        return "slope over " + ", ".join(name for name, _ in self.doses)


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
REUSE4 = Arm("reuse 4 (4, D, D/4)", "reuse4_dr64_dt16")
REUSE_ONLY = Arm("reuse 4 alone (4, D, D)", "reuse4_dr64_dt64")      # 4 updates a step from reuse, no mini-batches
NO_CONTROL = ("--learner.entropy.type", "none")
REUSE4_SYMMETRIC = Arm("reuse 4, eps_high 0.2", REUSE4.preset, ("--learner.entropy.type", "adaptive"))

FINDINGS: tuple[Finding, ...] = (
    Finding(
        "reuse", "Off-policy sample reuse collapses entropy faster", "Skywork-OR1 §4 (Figure: off-policy ablation)",
        "slips", (ONPOLICY, REUSE4, REUSE_ONLY),
        (Check("reuse-4 (16 updates per rollout batch) keeps less of its entropy than on-policy",
               "probe_entropy_ratio", ONPOLICY.name, REUSE4.name, "lower",
               "lower: (4, 64, 16)'s entropy collapses faster than (1, 64, 64)'s and its test accuracy "
               "ends lower (sizes shown in figures, not stated)"),
         Check("reuse alone (4, D, D: 4 updates, no mini-batches) keeps less of its entropy than on-policy",
               "probe_entropy_ratio", ONPOLICY.name, REUSE_ONLY.name, "lower",
               "lower: more SGD steps per rollout batch collapse entropy faster, from reuse as from "
               "mini-batches (figures only)"),
         Check("reuse-4 ends with a lower accuracy than on-policy", "accuracy_final", ONPOLICY.name, REUSE4.name,
               "lower", "lower: the off-policy runs' test accuracy ends below the on-policy run's (figures only)"),
         Check("reuse-4 keeps less of its entropy on the decisions that change the reward (direction, form)",
               "decision_entropy_ratio", ONPOLICY.name, REUSE4.name, "lower",
               "lower: as the entropy ratio (the paper measures all tokens; in the routes world two thirds of "
               "the entropy sits in reward-idle check words and separators, which RL leaves alone)")),
        gpu={ONPOLICY.name: "reuse1_dr64_dt64", REUSE4.name: "reuse4_dr64_dt16", REUSE_ONLY.name: "reuse4_dr64_dt64"},
        final_model=True),
    Finding(
        "minibatches", "More mini-batches per rollout batch also speed up collapse", "Skywork-OR1 §4",
        # a preset, not a --learner.batch.mini_batch override: an absolute D_T would be applied after a
        # world's scaling (D_R 32 or 16 there) and lose the ratio D_R/D_T = 4
        "slips", (ONPOLICY, Arm("(1, D, D/4)", "reuse1_dr64_dt16")),
        (Check("(1, D_R, D_T) with D_T = D_R/4 keeps less entropy than (1, D, D)",
               "probe_entropy_ratio", ONPOLICY.name, "(1, D, D/4)", "lower",
               "lower: more SGD steps per batch, from mini-batches as from reuse, collapse entropy faster "
               "(figures only)"),),
        gpu={ONPOLICY.name: "reuse1_dr64_dt64", "(1, D, D/4)": "reuse1_dr64_dt16"}),
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
        notes="The policy's own entropy (the probe, temperature 1) in every arm: the learner-side entropy of a "
              "tau 0.6 arm is that of its tempered sampling distribution. The entropy term is off in the first "
              "pair (adaptive control acts on the learner-side entropy, so it would act in one arm only) and on "
              "in both arms of the second.",
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
        "lag", "Entropy and accuracy against lag as a controlled dose", "Skywork-OR1 §4 (off-policy updates "
        "speed up entropy collapse), measured here as a dose: every token trained at update lag exactly k",
        "slips", LAG_ARMS,
        (SlopeCheck("entropy ratio falls as the lag k grows (0, 1, 2, 4, 8)", "probe_entropy_ratio",
                    tuple((a.name, float(k)) for a, k in zip(LAG_ARMS, LAG_DOSES)), "lower",
                    "lower, as a direction only: the paper compares off- with on-policy updates and reports "
                    "no dose-response"),
         SlopeCheck("accuracy at the end falls as the lag k grows", "accuracy_final",
                    tuple((a.name, float(k)) for a, k in zip(LAG_ARMS, LAG_DOSES)), "lower",
                    "lower, as a direction only: off-policy runs end with lower test accuracy; no dose given")),
        notes="Each dose is the baseline with --learner.fixed_lag k (one update per step, the same lr). A "
              "lag-k run's first k steps train at lag < k (no version k behind version 0), so every dose is "
              "measured over the same steps, from the largest k (8) on: equal windows, one factor apart.",
        gpu={a.name: a.preset for a in LAG_ARMS}),
    Finding(
        "multistage", "Multi-stage context lengthening", "Skywork-OR1 §3 (multi-stage training)", "reasoning",
        (Arm("fixed short budget", "multistage", ("--data.stages", '[{"max_tokens": 64}]')),
         Arm("64 -> 128 -> 256", "multistage")),
        (Check("responses grow more under the growing budget", "length_growth",
               "fixed short budget", "64 -> 128 -> 256", "higher",
               "higher: responses lengthen at each stage's larger context (8K -> 16K -> 32K; figures only)"),
         Check("accuracy ends higher under the growing budget", "accuracy_final",
               "fixed short budget", "64 -> 128 -> 256", "higher",
               "higher: the staged run reaches the single long-context run's accuracy at less compute; a "
               "short budget alone caps it (figures only)"),
         Check("the truncation rate drops when a stage starts", "truncation_drop_at_stage_starts",
               None, "64 -> 128 -> 256", "higher",
               "higher: the truncation ratio falls at each stage start (figures only)")),
        gpu={"fixed short budget": "multistage + --data.stages [{max_tokens: 8192}]", "64 -> 128 -> 256": "multistage"}),
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
