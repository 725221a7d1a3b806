"""Message schema: bit-exact round trips, and every malformed payload rejected with a reason."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from buffer.codec import (
    decode_group,
    decode_map,
    decode_prompt,
    encode_group,
    encode_map,
    encode_prompt,
    pack_logprobs,
    pack_tokens,
)
from buffer.messages import InvalidMessage
from bench.synthetic import make_group, make_prompt
from tests.samples import encode_group_v1, tamper, tamper_response


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
    assert back.pin_version is None and b"pin_version" not in encode_prompt(p)   # absent unless pinned
    p.pin_version = 2                                                          # fixed-lag: exactly version 2
    assert decode_prompt(encode_prompt(p)).pin_version == 2
    assert back.seed is None and b"seed" not in encode_prompt(p)               # absent: the engine's stream
    p.seed = 1_000_003                                                         # the probe's: its own seed
    assert decode_prompt(encode_prompt(p)).seed == 1_000_003


GOOD = encode_group(make_group("g", n=2, tokens=4))
GOOD_V1 = encode_group_v1(make_group("g", n=2, tokens=4))
FOUR = {"logprobs": pack_logprobs([-1.0] * 4)}

# schema 2: a frame (header + arrays); every case by the reason it must get
BAD_GROUPS = {
    "truncated_prefix": (GOOD[:6], "truncated"),
    "truncated_header": (GOOD[:40], "truncated"),
    "truncated_arrays": (GOOD[:-4], "length_mismatch"),
    "extra_bytes": (GOOD + b"\0" * 8, "length_mismatch"),
    "garbage_header": (GOOD[:8] + b"\xc1" * (len(GOOD) - 8), "malformed_msgpack"),
    "unknown_schema": (tamper(GOOD, schema=99), "unknown_schema"),
    "schema_1_in_a_frame": (tamper(GOOD, schema=1), "unknown_schema"),
    "missing_schema": (tamper(GOOD, schema=None), "unknown_schema"),
    "wrong_kind": (tamper(GOOD, kind="prompt"), "wrong_kind"),
    "wrong_type_step": (tamper(GOOD, step="3"), "bad_field"),
    "wrong_type_bool_step": (tamper(GOOD, step=True), "bad_field"),
    "lengths_not_ints": (tamper(GOOD, lengths=["4", "4"]), "bad_field"),
    "negative_length": (tamper(GOOD, lengths=[-4, 12]), "bad_field"),
    "missing_column": (tamper(GOOD, reward=None), "bad_field"),
    "short_column": (tamper(GOOD, reward=[1.0]), "bad_field"),
    "odd_token_bytes": (tamper_response(GOOD, token_ids=b"\x01\x02\x03"), "length_mismatch"),
    "negative_token": (tamper_response(GOOD, token_ids=pack_tokens([1, -5, 2, 3])), "bad_tokens"),
    "length_mismatch": (tamper_response(GOOD, logprobs=pack_logprobs([-1.0, -2.0, -3.0])), "length_mismatch"),
    "nan_logprob": (tamper_response(GOOD, 1, logprobs=pack_logprobs([-1.0, np.nan, -1.0, -1.0])),
                    "nonfinite_logprobs"),
    "inf_logprob": (tamper_response(GOOD, logprobs=pack_logprobs([-1.0, np.inf, -1.0, -1.0])), "nonfinite_logprobs"),
    "neg_inf_logprob": (tamper_response(GOOD, logprobs=pack_logprobs([-np.inf, -1.0, -1.0, -1.0])),
                        "nonfinite_logprobs"),
    "positive_logprob": (tamper_response(GOOD, logprobs=pack_logprobs([0.5, -1.0, -1.0, -1.0])), "positive_logprobs"),
    "nan_reward": (tamper_response(GOOD, reward=float("nan")), "nonfinite_reward"),
    "wrong_type_finish_reason": (tamper_response(GOOD, finish_reason=1), "bad_field"),
    "versions_backwards": (tamper_response(GOOD, version_start=3, version_end=2), "bad_versions"),
    "empty_group": (encode_group(make_group("g", n=0)), "empty_group"),
    "empty_group_id": (tamper(GOOD, group_id=""), "bad_field"),
}

# schema 1: one msgpack map with bins (runs written before schema 2 stay readable)
BAD_GROUPS_V1 = {
    "malformed_msgpack": (b"\xc1\xc1 definitely not msgpack", "malformed_msgpack"),
    "truncated": (GOOD_V1[: len(GOOD_V1) // 2], "malformed_msgpack"),
    "unknown_schema": (tamper(GOOD_V1, schema=99), "unknown_schema"),
    "schema_2_as_a_map": (tamper(GOOD_V1, schema=2), "unknown_schema"),
    "not_a_map": (msgpack.packb([1, 2, 3]), "not_a_map"),
    "wrong_kind": (tamper(GOOD_V1, kind="prompt"), "wrong_kind"),
    "wrong_type_step": (tamper(GOOD_V1, step="3"), "bad_field"),
    "wrong_type_tokens_list": (tamper_response(GOOD_V1, token_ids=[1, 2, 3, 4]), "bad_field"),
    "odd_token_bytes": (tamper_response(GOOD_V1, token_ids=b"\x01\x02\x03"), "bad_tokens"),
    "negative_token": (tamper_response(GOOD_V1, token_ids=pack_tokens([1, -5, 2, 3])), "bad_tokens"),
    "length_mismatch": (tamper_response(GOOD_V1, logprobs=pack_logprobs([-1.0, -2.0, -3.0])), "length_mismatch"),
    "nan_logprob": (tamper_response(GOOD_V1, logprobs=pack_logprobs([-1.0, np.nan, -1.0, -1.0])),
                    "nonfinite_logprobs"),
    "positive_logprob": (tamper_response(GOOD_V1, logprobs=pack_logprobs([0.5, -1.0, -1.0, -1.0])),
                         "positive_logprobs"),
    "nan_reward": (tamper_response(GOOD_V1, reward=float("nan")), "nonfinite_reward"),
    "versions_backwards": (tamper_response(GOOD_V1, version_start=3, version_end=2), "bad_versions"),
    "empty_group": (tamper(GOOD_V1, responses=[]), "empty_group"),
    "empty_group_id": (tamper(GOOD_V1, group_id=""), "bad_field"),
    "response_not_map": (tamper(GOOD_V1, responses=[1]), "bad_response"),
}


def test_groups_are_framed_and_schema_1_stays_readable():
    g = make_group("g1", n=3, tokens=[5, 0, 7], version=2)
    framed, old = encode_group(g), encode_group_v1(g)
    assert framed[:4] == b"\xc1LG\x02" and old[:1] != b"\xc1"
    head_len = int.from_bytes(framed[4:8], "little")
    assert len(framed) == ((8 + head_len + 7) & ~7) + 8 * 12            # arrays 8-aligned, 12 tokens
    for payload in (framed, old):
        back = decode_group(payload)
        assert [r.token_ids.tobytes() for r in back.responses] == [r.token_ids.tobytes() for r in g.responses]
        assert [r.logprobs.tobytes() for r in back.responses] == [r.logprobs.tobytes() for r in g.responses]
    back = decode_group(framed)
    assert all(r.token_ids.flags.aligned and r.logprobs.flags.aligned for r in back.responses)
    assert back.responses[2].token_ids.base is not None                 # a view of the payload, not a copy


BAD_PAYLOADS = {**{f"schema2/{k}": v for k, v in BAD_GROUPS.items()},
                **{f"schema1/{k}": v for k, v in BAD_GROUPS_V1.items()}}


@pytest.mark.parametrize("case", sorted(BAD_PAYLOADS))
def test_bad_group_rejected_with_reason(case):
    payload, reason = BAD_PAYLOADS[case]
    with pytest.raises(InvalidMessage) as info:
        decode_group(payload)
    assert info.value.reason == reason


def test_bad_response_is_named():
    with pytest.raises(InvalidMessage, match="response 1"):
        decode_group(BAD_GROUPS["nan_logprob"][0])
    assert decode_group(tamper_response(GOOD, 1, **FOUR)).group_id == "g"   # the helper itself keeps a group valid


F32_MIN = np.float32(-3.4028235e38)


@pytest.mark.parametrize("values,reason", [
    ([-0.0, -1e-45, F32_MIN, -1.0], None),          # all negative: the one-reduction fast path
    ([0.0, -1.0, -1.0, -1.0], None),                # +0.0 (probability ~1): the float min/max path
    ([1e-4, F32_MIN, -0.0, -1.0], None),            # sampler rounding slack
    ([2e-4, -1.0, -1.0, -1.0], "positive_logprobs"),
    ([-np.inf, -1.0, -1.0, -1.0], "nonfinite_logprobs"),
    ([-1.0, -np.nan, -1.0, -1.0], "nonfinite_logprobs"),
    ([-1.0, np.nan, -1.0, -1.0], "nonfinite_logprobs"),
    ([0.0, -1.0, np.inf, -1.0], "nonfinite_logprobs"),
    ([-1.0, -1.0, -1.0, np.frombuffer(b"\x01\x00\x80\xff", np.float32)[0]], "nonfinite_logprobs"),  # -NaN, payload 1
])
def test_logprob_check_at_float32_bit_boundaries(values, reason):
    """The fast path reads log-probs' bits as int32; every float32 class lands on the right side."""
    payload = tamper_response(GOOD, 1, logprobs=np.array(values, np.float32).tobytes())
    if reason is None:
        assert decode_group(payload).responses[1].logprobs.tobytes() == np.array(values, np.float32).tobytes()
    else:
        with pytest.raises(InvalidMessage, match="response 1") as info:
            decode_group(payload)
        assert info.value.reason == reason


def test_oversize_rejected_before_parsing():
    with pytest.raises(InvalidMessage) as info:
        decode_group(GOOD, max_bytes=len(GOOD) - 1)
    assert info.value.reason == "oversize"
    assert decode_group(GOOD, max_bytes=len(GOOD)).group_id == "g"


@pytest.mark.parametrize("change,reason", [
    ({"n_samples": 0}, "bad_field"), ({"prompt_ids": b""}, "empty_prompt"),
    ({"prompt_ids": pack_tokens([-1])}, "bad_tokens"), ({"schema": 2}, "unknown_schema"),
    ({"meta": "x"}, "bad_field"), ({"pin_version": "2"}, "bad_field"), ({"pin_version": -1}, "bad_field"),
    ({"pin_version": 0, "min_version": 1}, "bad_field"), ({"seed": -1}, "bad_field"), ({"seed": 2**63}, "bad_field"),
    ({"seed": "7"}, "bad_field"),
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
