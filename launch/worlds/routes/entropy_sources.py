"""Where the routes policy's entropy sits: how much of it is in choices the reward depends on.

    .venv/bin/python -m launch.worlds.routes.entropy_sources                       # the warmed-up policy
    .venv/bin/python -m launch.worlds.routes.entropy_sources --model RUN/checkpoints/step_50/hf
    .venv/bin/python -m launch.worlds.routes.entropy_sources --world slips

Samples the validation problems once at τ (the actors' sampling) and splits the per-token entropy
(what the adaptive control steers) by the part of the grammar (``task.render``) each token starts in:

  direction   the first line's letter: forward from a or backward from the last letter
  form        the first token of a line's addition: total first (t+x), operand first (x+t) or '=' (short)
  check       the token after a line's addition: a check word or the newline that skips it
  separator   one of the six equivalent separators
  arithmetic  the operand copies and the rest of each addition, the boxed answer's digits
  structure   newlines after check words, the box's text, EOS

The choices are not equally relevant to the reward: a form changes how often a line comes out right
(the world's manifest), a separator or check word does not change what the box holds (in the routes
world; in the slips world the teacher slips after the rarer ones, so they do). RL lowers
entropy only where the choice is correlated with the reward, so the split says how much of the
starting entropy a run can be expected to lose. A response outside the grammar counts as "unparsed".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from launch.worlds import entry, load
from launch.worlds.routes import STAGE_BUDGETS
from launch.worlds.routes.task import LINE, SumProblem, read_jsonl
from launch.worlds.sampling import generate_batched

CLASSES = ("direction", "form", "check", "separator", "arithmetic", "structure", "unparsed")
# the parts whose choice changes how often a response ends right (the world's manifest: routes and
# forms differ in accuracy); checks and separators never change what the box holds
DECISIONS = ("direction", "form")
# in the slips world separators and check words change the reward too (the teacher slips after them)
DECISIONS_BY_WORLD = {"routes": DECISIONS, "slips": (*DECISIONS, "separator", "check")}
_BOX = re.compile(r"\\boxed\{(?P<digits>\d+)\}")


def char_classes(text: str) -> list[str] | None:
    """The class of every character of a response (its EOS not included), or None outside the grammar."""
    *lines, box = text.split("\n")
    out: list[str] = []
    for n, line in enumerate(lines):
        m = LINE.fullmatch(line)
        if not m or (n == 0) != (m["body"] is None):      # only the first line adds nothing
            return None
        out += ["direction" if n == 0 else "arithmetic", "arithmetic"]
        if m["sep"]:
            out += ["separator"] * len(m["sep"]) + ["form"] + ["arithmetic"] * (len(m["body"]) - 1)
        if m["check"]:
            out += ["check"] * len(m["check"]) + ["structure"]           # the newline after a check word
        else:
            out.append("check")                                          # the newline that skips the check
    m = _BOX.fullmatch(box)
    if not m:
        return None
    return out + ["structure"] * len("\\boxed{") + ["arithmetic"] * len(m["digits"]) + ["structure"]


def token_classes(pieces: list[str], eos: bool) -> list[str]:
    """The class of each token, given the decoded text of each (``pieces``): the class of its first
    character; a token with no text of its own (EOS) is structure; all "unparsed" outside the grammar."""
    classes = char_classes("".join(pieces))
    if classes is None:
        return ["unparsed"] * (len(pieces) + eos)
    out, at = [], 0
    for piece in pieces:
        out.append(classes[at] if piece and at < len(classes) else "structure")
        at += len(piece)
    return out + ["structure"] * eos


def entropy_by_class(token_ids: list[list[int]], entropies: list[list[float]], decode, eos_id: int) -> dict:
    """class -> {"tokens": share of response tokens, "entropy": share of the summed entropy, "mean": nats
    per token of the class}; and "total" -> the mean entropy per token over every class."""
    count: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for ids, ents in zip(token_ids, entropies):
        eos = bool(ids) and ids[-1] == eos_id
        body = ids[:-1] if eos else ids
        for cls, h in zip(token_classes([decode([t]) for t in body], eos), ents, strict=True):
            count[cls] += 1
            total[cls] += h
    n, h_all = max(sum(count.values()), 1), sum(total.values())
    out = {c: {"tokens": count[c] / n, "entropy": total[c] / h_all if h_all else 0.0,
               "mean": total[c] / count[c] if count[c] else 0.0} for c in CLASSES}
    out["total"] = {"tokens": 1.0, "entropy": 1.0, "mean": h_all / n}
    return out


def decision_entropy(split: dict, parts: tuple[str, ...] = DECISIONS) -> float:
    """Mean entropy (nats/token) over the tokens of the ``parts`` (the routes world's DECISIONS) of an
    :func:`entropy_by_class` split."""
    tokens = sum(split[c]["tokens"] for c in parts)
    return sum(split[c]["tokens"] * split[c]["mean"] for c in parts) / tokens if tokens else float("nan")


def measure(model_dir: Path, problems: list[SumProblem], *, seed: int, temperature: float,
            max_new_tokens: int, batch_size: int = 120) -> dict:
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM


    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = Qwen2ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    ids, ents = generate_batched(model, tok, [p.prompt for p in problems], seed=seed, temperature=temperature,
                                 max_new_tokens=max_new_tokens, batch_size=batch_size)
    return entropy_by_class(ids, ents, lambda t: tok.decode(t, skip_special_tokens=False), tok.eos_token_id)


def format_table(name: str, split: dict) -> list[str]:
    lines = [f"{name}: {split['total']['mean']:.3f} nats/token",
             f"  {'class':<11} {'tokens':>7} {'entropy':>8} {'nats/token':>11}"]
    for c in CLASSES:
        s = split[c]
        lines.append(f"  {c:<11} {s['tokens']:>7.1%} {s['entropy']:>8.1%} {s['mean']:>11.3f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, action="append", default=[],
                    help="an HF model directory (a checkpoint's hf/); repeatable; default: the world's warmed-up model")
    ap.add_argument("--world", choices=("routes", "slips"), default="routes",
                    help="whose warmed-up model and validation problems (slips: the same grammar, where separators "
                         "and check words change the reward too)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--json", type=Path, default=None,
                    help="also write {'seed', 'temperature', 'models': [...], 'splits': [...]} here")
    args = ap.parse_args(argv)
    world = load(entry(args.world).build)()
    problems = read_jsonl(world.val_path)
    models, splits = args.model or [world.model_dir], []
    for model_dir in models:
        splits.append(measure(model_dir, problems, seed=args.seed, temperature=args.temperature,
                              max_new_tokens=max(STAGE_BUDGETS)))
        print("\n".join(format_table(f"{model_dir} at τ={args.temperature:g}", splits[-1])), flush=True)
        parts = DECISIONS_BY_WORLD[args.world]
        print(f"  decisions ({', '.join(parts)}): {decision_entropy(splits[-1], parts):.3f} nats/token", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"seed": args.seed, "temperature": args.temperature,
                                         "models": [str(m) for m in models], "splits": splits}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
