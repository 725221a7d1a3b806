"""The code world's problems: "a+b" arithmetic (math) and one-line Python programs (code), as verl rows.

Code problems name an operation in words and a constant, in one of the sandbox's three test kinds:

    call     "f(x) = x plus 7"              -> def f(x):\n    return x+7          (function-call tests)
    assert   "g(x) = x times 7"             -> def g(x):\n    return x*7          (assert tests)
    stdio    "read x, print x minus 7"      -> print(int(input())-7)             (stdin/stdout tests)

Each answer is a ```python block; each problem has three tests (x = 3, 10, -4). The gold program is in
``extra_info.solution`` (the warm-up's target; never shown to the policy). Math problems are the tiny
world's with smaller operands (0 <= a, b < 20: learnt in fewer warm-up steps), gold answer the sum
(math-verify against the last ``\\boxed{}``). Splits are a deterministic function of the seed;
validation problems never appear in training.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

MATH_SOURCE = "arith"
CODE_SOURCE = "code_oneliner"       # "code" prefix: RewardConfig.code_data_sources routes it to the sandbox
CODE_SYSTEM = "python"              # the system message of a code problem (rendered as "# python")
OPS = {"plus": ("+", lambda x, k: x + k), "minus": ("-", lambda x, k: x - k), "times": ("*", lambda x, k: x * k)}
KINDS = ("call", "assert", "stdio")
TEST_INPUTS = (3, 10, -4)
MAX_CONSTANT = 40
MAX_OPERAND = 20


@dataclass(frozen=True)
class Item:
    """One problem: its verl row plus what the warm-up needs (the rendered user text and the target)."""
    id: str
    kind: str                  # "math" or "call" / "assert" / "stdio"
    user: str
    solution: str              # the response the warm-up teaches (without EOS)
    row: dict

    @property
    def is_code(self) -> bool:
        return self.kind != "math"

    @property
    def messages(self) -> list[dict]:
        return self.row["prompt"]


def _row(source: str, ability: str, messages: list[dict], ground_truth, extra: dict) -> dict:
    return {"data_source": source, "prompt": messages, "ability": ability,
            "reward_model": {"style": "rule", "ground_truth": ground_truth}, "extra_info": extra}


def math_items() -> list[Item]:
    items = []
    for a in range(MAX_OPERAND):
        for b in range(MAX_OPERAND):
            pid, user = f"add-{a}-{b}", f"{a}+{b}"
            row = _row(MATH_SOURCE, "math", [{"role": "user", "content": user}], str(a + b),
                       {"index": pid, "solution": f"\\boxed{{{a + b}}}"})
            items.append(Item(pid, "math", user, f"\\boxed{{{a + b}}}", row))
    return items


def code_item(kind: str, op: str, k: int) -> Item:
    symbol, fn = OPS[op]
    expr = f"x{symbol}{k}"
    if kind == "call":
        user, program = f"f(x) = x {op} {k}", f"def f(x):\n    return {expr}"
        gt = {"fn_name": "f", "inputs": [[x] for x in TEST_INPUTS], "outputs": [fn(x, k) for x in TEST_INPUTS]}
    elif kind == "assert":
        user, program = f"g(x) = x {op} {k}", f"def g(x):\n    return {expr}"
        gt = [f"assert g({x}) == {fn(x, k)}" for x in TEST_INPUTS]
    else:
        user, program = f"read x, print x {op} {k}", f"print(int(input()){symbol}{k})"
        gt = {"inputs": [f"{x}\n" for x in TEST_INPUTS], "outputs": [f"{fn(x, k)}\n" for x in TEST_INPUTS]}
    solution = f"```python\n{program}\n```"
    pid = f"{kind}-{op}-{k}"
    messages = [{"role": "system", "content": CODE_SYSTEM}, {"role": "user", "content": user}]
    return Item(pid, kind, user, solution, _row(CODE_SOURCE, "code", messages, json.dumps(gt),
                                                 {"index": pid, "solution": program}))


def code_items() -> list[Item]:
    return [code_item(kind, op, k) for kind in KINDS for op in OPS for k in range(1, MAX_CONSTANT + 1)]


@dataclass(frozen=True)
class Splits:
    warmup: list[Item]         # every non-validation problem (SFT draws math and code half and half)
    train: list[Item]          # the RL training set: as many math as code problems
    val: list[Item]            # held out: n_val of each kind


def make_splits(seed: int, n_val: int = 60) -> Splits:
    rng = random.Random(seed)
    math, code = math_items(), code_items()
    rng.shuffle(math)
    rng.shuffle(code)
    val = math[:n_val] + code[:n_val]
    code_train = code[n_val:]
    math_rest = math[n_val:]
    train = math_rest[:len(code_train)] + code_train
    rng.shuffle(train)
    rng.shuffle(val)          # so a capped evaluation (data.eval_max_problems) still holds both kinds
    return Splits(warmup=math_rest + code_train, train=train, val=val)
