"""Message schema: bit-exact round trips, and every malformed payload rejected with a reason."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from buffer.samples import make_group, make_prompt, tamper, tamper_response
from buffer.schema import (InvalidMessage, decode_group, decode_map, decode_prompt, encode_group,
                           encode_map, encode_prompt, pack_logprobs, pack_tokens)


def test_group_round_trip_is_bit_exact():
    g = make_group("g1", n=3, tokens=[5, 0, 7], version=2)
    g.responses[0].logprobs[:3] = [-0.0, -1e-45, np.float32(-3.4028235e38)]  # -0, subnormal, min f32
    back = decode_group(encode_group(g))
    assert (back.group_id, back.step, back.actor_id, back.answer) == (g.group_id, g.step, g.actor_id, g.answer)
    assert back.prompt_ids.tobytes() == g.prompt_ids.tobytes()
    for a, b in zip(g.responses, back.responses):
        assert b.token_ids.dtype == np.int32 and b.logprobs.dtype == np.float32
        assert b.token_ids.tobytes() == a.token_ids.tobytes()
        assert b.logprobs.tobytes() == a.logprobs.tobytes()           # sign of -0.0 kept too
        assert (b.finish_reason, b.version_start, b.version_end, b.reward, b.reward_info) == \
               (a.finish_reason, a.version_start, a.version_end, a.reward, a.reward_info)
    assert back.created_at == g.created_at and back.finished_at == g.finished_at


def test_prompt_round_trip():
    p = make_prompt("p1", step=3, min_version=2)
    back = decode_prompt(encode_prompt(p))
    assert back.prompt_ids.tobytes() == p.prompt_ids.tobytes()
    assert (back.prompt_id, back.step, back.min_version, back.meta) == (p.prompt_id, 3, 2, p.meta)


GOOD = encode_group(make_group("g", n=2, tokens=4))

BAD_GROUPS = {
    "malformed_msgpack": b"\xc1\xc1 definitely not msgpack",
    "truncated": GOOD[: len(GOOD) // 2],
    "unknown_schema": tamper(GOOD, schema=99),
    "missing_schema": tamper(GOOD, schema=None),
    "not_a_map": msgpack.packb([1, 2, 3]),
    "wrong_kind": tamper(GOOD, kind="prompt"),
    "wrong_type_step": tamper(GOOD, step="3"),
    "wrong_type_bool_step": tamper(GOOD, step=True),
    "wrong_type_tokens_list": tamper_response(GOOD, token_ids=[1, 2, 3, 4]),
    "odd_token_bytes": tamper_response(GOOD, token_ids=b"\x01\x02\x03"),
    "negative_token": tamper_response(GOOD, token_ids=pack_tokens([1, -5, 2, 3])),
    "length_mismatch": tamper_response(GOOD, logprobs=pack_logprobs([-1.0, -2.0, -3.0])),
    "nan_logprob": tamper_response(GOOD, logprobs=pack_logprobs([-1.0, np.nan, -1.0, -1.0])),
    "inf_logprob": tamper_response(GOOD, logprobs=pack_logprobs([-1.0, np.inf, -1.0, -1.0])),
    "neg_inf_logprob": tamper_response(GOOD, logprobs=pack_logprobs([-np.inf, -1.0, -1.0, -1.0])),
    "positive_logprob": tamper_response(GOOD, logprobs=pack_logprobs([0.5, -1.0, -1.0, -1.0])),
    "nan_reward": tamper_response(GOOD, reward=float("nan")),
    "versions_backwards": tamper_response(GOOD, version_start=3, version_end=2),
    "empty_group": tamper(GOOD, responses=[]),
    "empty_group_id": tamper(GOOD, group_id=""),
    "response_not_map": tamper(GOOD, responses=[1]),
}
EXPECTED_REASON = {
    "malformed_msgpack": "malformed_msgpack", "truncated": "malformed_msgpack", "unknown_schema": "unknown_schema",
    "missing_schema": "unknown_schema", "not_a_map": "not_a_map", "wrong_kind": "wrong_kind",
    "wrong_type_step": "bad_field", "wrong_type_bool_step": "bad_field", "wrong_type_tokens_list": "bad_field",
    "odd_token_bytes": "bad_tokens", "negative_token": "bad_tokens", "length_mismatch": "length_mismatch",
    "nan_logprob": "nonfinite_logprobs", "inf_logprob": "nonfinite_logprobs",
    "neg_inf_logprob": "nonfinite_logprobs", "positive_logprob": "positive_logprobs",
    "nan_reward": "nonfinite_reward", "versions_backwards": "bad_versions", "empty_group": "empty_group",
    "empty_group_id": "bad_field", "response_not_map": "bad_response",
}


@pytest.mark.parametrize("case", sorted(BAD_GROUPS))
def test_bad_group_rejected_with_reason(case):
    with pytest.raises(InvalidMessage) as info:
        decode_group(BAD_GROUPS[case])
    assert info.value.reason == EXPECTED_REASON[case]


def test_oversize_rejected_before_parsing():
    with pytest.raises(InvalidMessage) as info:
        decode_group(GOOD, max_bytes=len(GOOD) - 1)
    assert info.value.reason == "oversize"
    assert decode_group(GOOD, max_bytes=len(GOOD)).group_id == "g"


@pytest.mark.parametrize("change,reason", [
    ({"n_samples": 0}, "bad_field"), ({"prompt_ids": b""}, "empty_prompt"),
    ({"prompt_ids": pack_tokens([-1])}, "bad_tokens"), ({"schema": 2}, "unknown_schema"),
    ({"meta": "x"}, "bad_field"),
])
def test_bad_prompt_rejected(change, reason):
    with pytest.raises(InvalidMessage) as info:
        decode_prompt(tamper(encode_prompt(make_prompt("p")), **change))
    assert info.value.reason == reason


def test_metrics_map_keeps_int_keys_and_numpy_scalars():
    row = decode_map(encode_map({"step": np.int64(3), "lag/hist": {0: 5, 2: 1}, "entropy/mean": np.float32(0.5)}))
    assert row["step"] == 3 and row["lag/hist"] == {0: 5, 2: 1} and row["entropy/mean"] == 0.5
    with pytest.raises(InvalidMessage):
        decode_map(b"\xc1")
