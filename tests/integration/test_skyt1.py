"""The Sky-T1 recipe on the tiny world: SFT -> PRIME -> SFT -> RLOO, each stage's output the next's input.

``launch.skyt1_pipeline`` runs the four stages as the commands a user runs (``python -m launch.sft``,
``launch/ablate.py --preset skyt1_prime|skyt1_rloo --tiny``): real DeepSpeed for the SFT stages, and
real Ray, Redis, vLLM, DeepSpeed and math-verify for the RL stages, where the policy, the implicit PRM
and the frozen reference are all DeepSpeed/torch models on the learner's rank. SFT data are correct
traces of the tiny task's training problems (never the held-out ones), written here.

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

pytestmark = pytest.mark.integration

PRIME_STEPS = 10
RLOO_STEPS = 40
MIN_GAIN = 0.05        # RLOO: best held-out avg@n must beat the stage's first evaluation by this much
SFT_ARGS = "--epochs 3 --batch_size 32 --lr 3e-4"     # Sky-T1's 3 epochs: 16 updates each


def _write_sft_data(path: Path, problems) -> None:
    from launch.tiny.task import PROMPT_TEMPLATE
    with open(path, "w") as f:
        for p in problems:
            f.write(json.dumps({"prompt": PROMPT_TEMPLATE.format(problem=p.problem),
                                "response": f"\\boxed{{{p.answer}}}"}) + "\n")


def _rows(run_path: str) -> list[dict]:
    return [json.loads(line) for line in (Path(run_path) / "metrics.jsonl").read_text().splitlines()]


def _curve(figures: dict) -> dict[int, float]:
    return {int(k.split("@")[1]): v for k, v in figures.items() if k.startswith("eval/pass@")}


def test_sft_prime_sft_rloo_chain_on_the_tiny_world(tmp_path, tiny_world):
    from launch.skyt1_pipeline import main
    from rewards.problems import load_problems

    train = load_problems(tiny_world.train_path)
    held_out = {p.problem for p in load_problems(tiny_world.val_path)}
    assert not held_out & {p.problem for p in train[:1024]}
    _write_sft_data(tmp_path / "sft1.jsonl", train[:512])
    _write_sft_data(tmp_path / "sft2.jsonl", train[512:1024])
    out = tmp_path / "skyt1"
    stages = main(["--tiny", "--out", str(out), "--sft1_data", str(tmp_path / "sft1.jsonl"),
                   "--sft2_data", str(tmp_path / "sft2.jsonl"), "--sft_args", SFT_ARGS,
                   "--prime_args", f"--steps {PRIME_STEPS}", "--rloo_args", f"--steps {RLOO_STEPS}"])

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

    # PRIME: PRM, reference and policy trained/scored every step; the PRM beats chance held out
    rows = [r for r in _rows(prime["run_path"]) if "prm/loss" in r]
    assert len(rows) == PRIME_STEPS and prime["stop_reason"] == "completed"
    assert rows[0]["prm/loss"] == pytest.approx(np.log(2), abs=1e-6)        # PRM = reference before any update
    pairwise = [r["prm/pairwise_accuracy"] for r in rows[1:]]
    assert np.mean(pairwise) > 0.5, pairwise
    assert all(r["groups/filtered"] > 0 for r in rows[:3]) and all(0 < r["prompts/filtered_frac"] < 1 for r in rows)
    assert (Path(prime["weights"]).parent / "prm" / "hf" / "model.safetensors").exists()

    # RLOO: no filtering (exactly D_R groups per step, none dropped), held-out accuracy rises
    rows = _rows(rloo["run_path"])
    steps = [r for r in rows if "groups/read" in r]
    assert len(steps) == RLOO_STEPS and all(r["groups/zero_adv_dropped"] == 0 for r in steps)
    assert all(r["groups/trained"] == 32 and "prm/loss" not in r for r in steps)
    evals = json.loads((Path(rloo["run_path"]) / "summary.json").read_text())["evals"]
    first, best, last = evals[0]["eval/avg@n"], max(e["eval/avg@n"] for e in evals[1:]), evals[-1]["eval/avg@n"]
    assert best >= first + MIN_GAIN and last > first, [e["eval/avg@n"] for e in evals]

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
