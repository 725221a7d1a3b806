"""The Sky-T1 recipe on the tiny world: SFT -> PRIME -> SFT -> RLOO, each stage's output the next's input.

``launch.recipes.skyt1.pipeline`` runs the four stages as the commands a user runs (``python -m launch.recipes.sft``,
``launch/ablate.py --preset skyt1_prime|skyt1_rloo --tiny``): real DeepSpeed for the SFT stages, and
real Ray, Redis, vLLM, DeepSpeed and math-verify for the RL stages, where the policy and the implicit
PRM are DeepSpeed engines and the frozen reference a torch model on the learner's rank. SFT data are
correct traces of the tiny task's training problems (never the held-out ones), written by the pipeline.

Checked: the chain (each stage loads the previous stage's directory), the PRIME stage's PRM is better
than chance on rollouts it has not been trained on yet (held-out pairwise accuracy: chance is 0.5 by
construction) and the prompt filter runs, the RLOO stage raises held-out accuracy above its start (the
second SFT's model), and both RL stages report pass@k curves. The figures are printed for the notes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.integration.harness import metrics_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]     # ~3.5 min: two SFT runs and two RL runs

PRIME_STEPS = 10
RLOO_STEPS = 40
MIN_PRM_PAIRWISE = 0.55  # the PRM's mean held-out pairwise accuracy after its first update (chance: 0.5)


def _rows(run_path: str) -> list[dict]:
    return metrics_rows(Path(run_path))


def _curve(figures: dict) -> dict[int, float]:
    return {int(k.split("@")[1]): v for k, v in figures.items() if k.startswith("eval/pass@")}


def test_sft_prime_sft_rloo_chain_on_the_tiny_world(tmp_path, tiny_world):
    from launch.recipes.skyt1.pipeline import main

    out = tmp_path / "skyt1"
    stages = main(["--tiny", "--out", str(out),
                   "--prime_args", f"--steps {PRIME_STEPS}", "--rloo_args", f"--steps {RLOO_STEPS}"])
    assert json.loads((out / "pipeline.json").read_text()) == stages

    # the SFT data the pipeline wrote: correct traces of training problems, disjoint, none held out
    from launch.worlds.tiny.task import read_problems
    gold = {p.prompt: p.answer for p in read_problems(tiny_world.train_path)}
    held_out = {p.prompt for p in read_problems(tiny_world.val_path)}
    sft = [[json.loads(line) for line in (out / f"sft{i}.jsonl").read_text().splitlines()] for i in (1, 2)]
    prompts = [{r["prompt"] for r in rows} for rows in sft]
    assert len(prompts[0]) == len(prompts[1]) == 512 and not prompts[0] & prompts[1]
    assert not (prompts[0] | prompts[1]) & held_out
    assert all(r["response"] == f"\\boxed{{{gold[r['prompt']]}}}" for rows in sft for r in rows)

    # the chain: every stage read the previous stage's output
    prime, rloo = stages["rl1_prime"], stages["rl2_rloo"]
    assert stages["sft1"]["from"] == str(tiny_world.model_dir)
    config = lambda s: json.loads((Path(s["run_path"]) / "config.json").read_text())  # noqa: E731
    assert config(prime)["data"]["model_dir"] == stages["sft1"]["model"]
    assert stages["sft2"]["from"] == prime["weights"] and Path(prime["weights"]).parent.name.startswith("step_")
    assert config(rloo)["data"]["model_dir"] == stages["sft2"]["model"]
    losses = {s: json.loads((Path(stages[s]["model"]) / "sft.json").read_text())["losses"] for s in ("sft1", "sft2")}
    assert all(len(v) == 48 and np.isfinite(v).all() for v in losses.values())     # 3 x 512 examples / batch 32
    # the first SFT teaches the base model: its last epoch's loss is well below its first's (measured:
    # 0.223 -> 0.162; a single batch's loss is too noisy to compare)
    first_epoch, last_epoch = np.mean(losses["sft1"][:16]), np.mean(losses["sft1"][32:])
    assert last_epoch < first_epoch - 0.02, losses["sft1"]
    # ... and the PRIME stage's first evaluation (= the SFT model) is above the base model's warm-up
    assert prime["before"]["eval/avg@n"] > tiny_world.manifest["warmup"]["accuracy"]

    # PRIME: PRM, reference and policy trained/scored every step; the PRM beats chance held out
    rows = [r for r in _rows(prime["run_path"]) if "prm/loss" in r]
    assert len(rows) == PRIME_STEPS and prime["stop_reason"] == "completed"
    assert rows[0]["prm/loss"] == pytest.approx(np.log(2), abs=1e-6)        # PRM = reference before any update
    pairwise = [r["prm/pairwise_accuracy"] for r in rows[1:]]
    assert np.mean(pairwise) >= MIN_PRM_PAIRWISE, pairwise
    assert prime["prime"]["prm_pairwise_accuracy_mean"] == pytest.approx(np.mean(pairwise))  # in pipeline.json
    assert all(r["groups/filtered"] > 0 for r in rows[:3]) and all(0 < r["prompts/filtered_frac"] < 1 for r in rows)
    # the PRM's saved weights moved away from its initialisation (the SFT model's)
    from safetensors.torch import load_file
    prm_weights = load_file(Path(prime["weights"]).parent / "prm" / "hf" / "model.safetensors")
    init_weights = load_file(Path(stages["sft1"]["model"]) / "model.safetensors")
    assert prm_weights.keys() == init_weights.keys()
    assert any(not torch.equal(prm_weights[k].float(), init_weights[k].float()) for k in prm_weights)

    # RLOO: no filtering (exactly D_R groups per step, none dropped), held-out accuracy rises
    rows = _rows(rloo["run_path"])
    steps = [r for r in rows if "groups/read" in r]
    assert len(steps) == RLOO_STEPS and all(r["groups/zero_adv_dropped"] == 0 for r in steps)
    assert all(r["groups/trained"] == 32 and "prm/loss" not in r for r in steps)
    evals = json.loads((Path(rloo["run_path"]) / "summary.json").read_text())["evals"]
    accuracy = [e["eval/avg@n"] for e in evals]
    # above the base model's warm-up at every evaluation, and above the stage's own start at its best
    # (from the SFT model's ~0.56 the tiny world leaves RLOO little room: measured +0.03 in 40 steps)
    assert min(accuracy) > tiny_world.manifest["warmup"]["accuracy"], accuracy
    assert max(accuracy[1:]) > accuracy[0], accuracy

    # pass@k curves at the start and end of both RL stages: k = 1, 2, 4 (n = 4), never decreasing in k
    for s in (prime, rloo):
        for which in ("before", "after"):
            curve = _curve(s[which])
            assert sorted(curve) == [1, 2, 4] and curve[1] <= curve[2] <= curve[4], curve
            assert curve[1] == pytest.approx(s[which]["eval/avg@n"])
    print("\n[skyt1] figures:", json.dumps({
        "base_warmup_accuracy": tiny_world.manifest["warmup"]["accuracy"],
        "sft1_loss": [stages["sft1"]["loss_first"], stages["sft1"]["loss_last"]],
        "prime": {"before": prime["before"], "after": prime["after"], "prm_pairwise": pairwise,
                  "prm_accuracy": [r["prm/accuracy"] for r in _rows(prime["run_path"]) if "prm/accuracy" in r],
                  "filtered_frac": [r["prompts/filtered_frac"] for r in _rows(prime["run_path"])
                                    if "prompts/filtered_frac" in r]},
        "sft2_loss": [stages["sft2"]["loss_first"], stages["sft2"]["loss_last"]],
        "rloo": {"before": rloo["before"], "after": rloo["after"], "evals": [e["eval/avg@n"] for e in evals]},
    }, indent=1))
