"""The routes world's task generator and parser: the trace grammar (hand-written examples), every
sampled route parses back to correct arithmetic, the route entropy against a brute-force
enumeration, determinism and disjointness of the splits, response length growing with k, and that
math-verify (the RL reward) credits sampled routes and rejects corrupted ones; the slips world's
teacher (its slip rates, its slipped lines parsed as wrong, its choice entropy) and that the routes
teacher still writes the data it wrote before the teachers existed."""

from __future__ import annotations

import collections
import hashlib
import itertools
import math
import random
from pathlib import Path

import pytest

from launch.worlds.routes.task import (
    CHECKS,
    DIRECTIONS,
    FORMS,
    K_MAX,
    K_MIN,
    SEPARATORS,
    SLIPS_TEACHER,
    Route,
    SumProblem,
    make_problem,
    make_splits,
    parse_response,
    plain_route,
    read_jsonl,
    render,
    route_entropy_nats,
    sample_trace,
    write_jsonl,
)
from rewards.config import RewardConfig
from rewards.math_reward import score_math_group

CFG = RewardConfig(math_timeout_s=2.0, math_kill_grace_s=1.0)
ABCD = SumProblem("p", "routes_sum", "Add:\na7\nb5\nc3\nd8", "23", 4)


@pytest.fixture(scope="module")
def splits() -> tuple[list[SumProblem], list[SumProblem]]:
    return make_splits(0, n_train=3000, n_val=240)


def test_render_hand_written_routes():
    assert ABCD.operands == [7, 5, 3, 8]
    forward = Route("forward", (",", ";", ":"), ("t+x", "short", "x+t"), ("", "", " ok", ""))
    assert render(ABCD.operands, forward) == "a7\nb5,7+5=12\nc3;=15 ok\nd8:8+15=23\n\\boxed{23}"
    assert render(ABCD.operands, plain_route(4)) == "a7\nb5,7+5=12\nc3,12+3=15\nd8,15+8=23\n\\boxed{23}"
    backward = Route("backward", ("->", " so", "|"), ("x+t", "t+x", "short"), (" good", "", " yes", ""))
    assert render(ABCD.operands, backward) == "d8 good\nc3->3+8=11\nb5 so11+5=16 yes\na7|=23\n\\boxed{23}"


def test_parse_reads_routes_and_catches_errors():
    parsed = parse_response("a7\nb5,7+5=12\nc3;=15 ok\nd8:8+15=23\n\\boxed{23}", ABCD)
    assert parsed.letters == ("a", "b", "c", "d") and parsed.forms == ("t+x", "short", "x+t")
    assert parsed.line_ok == (True, True, True) and parsed.boxed == 23 and parsed.route == "forward"
    assert parse_response("d8 good\nc3->3+8=11\nb5 so11+5=16 yes\na7|=23\n\\boxed{23}", ABCD).route == "backward"
    skipped = parse_response("a7\nc3,7+3=10\nd8,10+8=18\n\\boxed{18}", ABCD)        # b never taken
    assert skipped.route == "invalid" and skipped.arithmetic_ok                    # right sums of the wrong terms
    assert parse_response("a7\nb5,7+5=12\nb5,12+5=17\nd8,17+8=25\n\\boxed{25}", ABCD).route == "invalid"
    wrong = parse_response("a7\nb5,7+5=12\nc3,12+3=16\nd8,16+8=24\n\\boxed{24}", ABCD)
    assert wrong.route == "forward" and wrong.line_ok == (True, False, True) and not wrong.arithmetic_ok
    misread = parse_response("a7\nb6,7+6=13\nc3,13+3=16\nd8,16+8=24\n\\boxed{24}", ABCD)   # b is 5
    assert misread.line_ok == (False, True, True)
    other = parse_response("a7\nb5,6+6=12\nc3,12+3=15\nd8,15+8=23\n\\boxed{23}", ABCD)
    assert other.forms[0] == "other" and other.line_ok == (False, True, True)
    assert parse_response("a7\nb5,7+5=12\nc3,12+3=15\nd8,15+8=23\n\\boxed{24}", ABCD).line_ok[-1] is False
    assert parse_response("a7\nb5,7+5=12", ABCD) is None                         # cut before the box
    assert parse_response("a7,=7\n\\boxed{7}", ABCD) is None                    # the first line only starts
    assert parse_response("a7\nb5\n\\boxed{12}", ABCD) is None                # later lines add
    assert parse_response("a7\nb5#7+5=12\n\\boxed{12}", ABCD) is None         # not a separator


def test_every_sampled_route_parses_back_correct(splits):
    _, val = splits
    rng = random.Random(5)
    seen = collections.Counter()
    for p in val:
        for _ in range(4):
            parsed = parse_response(sample_trace(p, rng), p)
            assert parsed and parsed.arithmetic_ok and parsed.boxed == int(p.answer), p
            seen[parsed.route] += 1
            seen.update(parsed.forms)
    assert set(seen) == {"forward", "backward", *FORMS}


def test_route_entropy_matches_brute_force_enumeration():
    """k=3: every route's probability from the sampler's rules, summed over distinct texts."""
    k, operands = 3, [4, 6, 9]
    texts: dict[str, float] = collections.defaultdict(float)
    for direction, p_dir in DIRECTIONS.items():
        for seps in itertools.product(SEPARATORS, repeat=k - 1):
            for forms in itertools.product(FORMS, repeat=k - 1):
                for checks in itertools.product(CHECKS, repeat=k):
                    p = p_dir / len(SEPARATORS) ** (k - 1) * math.prod(FORMS[f] for f in forms) \
                        * math.prod(CHECKS[c] for c in checks)
                    texts[render(operands, Route(direction, seps, forms, checks))] += p
    assert len(texts) == 2 * 6 ** 2 * 3 ** 2 * 4 ** 3                          # every route its own text
    assert math.isclose(sum(texts.values()), 1.0, abs_tol=1e-9)
    brute = -sum(p * math.log(p) for p in texts.values())
    assert route_entropy_nats(3) == pytest.approx(brute, rel=1e-9)
    # 0.673 (direction) + 3 * 1.2425 (check words) + 2 * (ln 6 + 1.0889) (separator, form)
    assert route_entropy_nats(3) == pytest.approx(10.1618, abs=1e-3)


def test_splits_are_deterministic_disjoint_and_balanced(splits):
    train, val = splits
    assert make_splits(0, n_train=3000, n_val=240) == splits
    assert [p.problem for p in make_splits(1, n_train=3000, n_val=240)[1]] != [p.problem for p in val]
    assert len(train) == 3000 and len(val) == 240 and len({p.problem for p in val}) == 240
    assert not {p.problem for p in train} & {p.problem for p in val}
    val_k = collections.Counter(p.k for p in val)
    assert set(val_k) == set(range(K_MIN, K_MAX + 1)) and max(val_k.values()) - min(val_k.values()) <= 1
    assert set(collections.Counter(p.k for p in train)) == set(range(K_MIN, K_MAX + 1))


def test_problem_record():
    p = make_problem(random.Random(1), 7, k=4)
    assert p.k == 4 and len(p.operands) == 4 and p.answer == str(sum(p.operands)) and p.id == "route-000007"
    assert p.prompt == f"Q: {p.problem}\nA: " and all(1 <= x <= 9 for x in p.operands)


def test_trace_tokens_grow_with_k(splits, tmp_path: Path):
    from launch.worlds.tiny.build import VOCAB_SIZE
    from launch.worlds.tokenizer import train_tokenizer

    train, val = splits
    rng = random.Random(0)
    tok = train_tokenizer([p.prompt + sample_trace(p, rng) for p in train[:500]], tmp_path, vocab_size=VOCAB_SIZE)
    by_k = collections.defaultdict(list)
    for p in val:
        by_k[p.k] += [len(tok(sample_trace(p, rng))["input_ids"]) + 1 for _ in range(4)]    # + EOS
    means = [sum(v) / len(v) for _, v in sorted(by_k.items())]
    assert means == sorted(means) and 24 <= means[0] <= 32 and 90 <= means[-1] <= 110
    assert max(max(v) for v in by_k.values()) <= 125


def test_jsonl_round_trip(splits, tmp_path: Path):
    _, val = splits
    write_jsonl(val, tmp_path / "val.jsonl")
    assert read_jsonl(tmp_path / "val.jsonl") == val


def test_math_verify_credits_sampled_routes_and_rejects_corrupted_ones(splits):
    _, val = splits
    rng = random.Random(2)
    for p in val[:36]:
        trace = sample_trace(p, rng)
        head, _ = trace.rsplit("\\boxed", 1)
        off_by_one = head + f"\\boxed{{{int(p.answer) + 1}}}"
        good, bad, cut = score_math_group([trace, off_by_one, head], p.answer, CFG)
        assert (good.reward, good.reason) == (1.0, "correct"), (trace, good)
        assert (bad.reward, bad.reason) == (0.0, "wrong") and (cut.reward, cut.reason) == (0.0, "no_box")


def test_the_routes_teacher_writes_the_data_it_wrote_before_teachers_existed():
    """The routes world's cached files stay valid: the same problems and traces, draw for draw (the
    digest was taken from the task module before `Teacher` was added)."""
    train, _ = make_splits(0, n_train=300, n_val=16)
    rng = random.Random(5)
    text = "\n\n".join(p.prompt + sample_trace(p, rng) for p in train)
    assert hashlib.sha256(text.encode()).hexdigest() == "b2cfbd5a8c74ae6bf302a1012f56ef855308e6003d03f390d7dc1a8d9b726a17"


def test_a_slipped_line_is_wrong_and_carried_on_to_the_box():
    slipped = Route("forward", (",", ";", ":"), ("t+x", "short", "x+t"), ("", "", " ok", ""), (0, 1, 0))
    text = render(ABCD.operands, slipped)
    assert text == "a7\nb5,7+5=12\nc3;=16 ok\nd8:8+16=24\n\\boxed{24}"
    parsed = parse_response(text, ABCD)
    assert parsed.line_ok == (True, False, True) and parsed.route == "forward" and parsed.boxed == 24
    assert parsed.separators == (",", ";", ":") and parsed.checks == ("", "", " ok", "")
    assert score_math_group([text], ABCD.answer, CFG)[0].reward == 0.0


def test_the_slipping_teacher_slips_at_its_rates():
    """`,` after an unchecked line never slips; another separator 40% of the time, a check word on the
    line before adds 25% (binomial standard error <= 0.012 at these counts)."""
    from launch.worlds.routes.task import sample_route

    rng, lines = random.Random(0), collections.defaultdict(list)
    for _ in range(6000):
        route = sample_route(rng, 7, SLIPS_TEACHER)
        assert len(route.slips) == 6 and set(route.slips) <= {0, -2, -1, 1, 2}
        for sep, check, slip in zip(route.separators, route.checks, route.slips):
            lines[(sep == ",", check == "")].append(slip != 0)
    rate = {key: sum(v) / len(v) for key, v in lines.items()}
    assert rate[(True, True)] == 0.0
    assert rate[(True, False)] == pytest.approx(0.25, abs=0.04)
    assert rate[(False, True)] == pytest.approx(0.40, abs=0.04)
    assert rate[(False, False)] == pytest.approx(0.65, abs=0.05)
    share = len(lines[(True, True)]) + len(lines[(True, False)])
    assert share / sum(map(len, lines.values())) == pytest.approx(0.6, abs=0.02)       # `,` the likeliest


def test_the_slipping_teachers_choice_entropy_and_splits():
    # 0.6730 (direction) + 3 * 0.9404 (checks 0.7 / 0.1 x 3) + 2 * (1.3168 (`,` 0.6, five at 0.08) + 1.0889 (form))
    assert route_entropy_nats(3, SLIPS_TEACHER) == pytest.approx(8.3057, abs=1e-3)
    train, val = make_splits(0, n_train=500, n_val=20, teacher=SLIPS_TEACHER)
    assert {p.k for p in val} == {p.k for p in train} == set(range(3, 8))
