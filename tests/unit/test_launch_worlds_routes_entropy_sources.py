"""The split of the routes policy's entropy by grammar part (launch.worlds.routes.entropy_sources), by hand."""

from __future__ import annotations

import pytest

from launch.worlds.routes.entropy_sources import char_classes, entropy_by_class, token_classes


def test_every_character_of_a_response_gets_its_part():
    text = "c3 ok\nb5->3+5=8\na7;=15\n\\boxed{15}"
    got = "".join(c[0] for c in char_classes(text))
    #       c 3 _ o k \n b 5 - > 3 + 5 = 8 \n a 7 ; = 1 5 \n \ b o x e d { 1 5 }
    want = ("da" "ccc" "s"                  # first line: direction, copy, check word, newline after it
            "aa" "ss" "f" "aaaa" "c"        # separator '->', form (the total first), the sum, no check
            "aa" "s" "f" "aa" "c"           # short form: '=' is the form, no check
            "sssssss" "aa" "s")             # \boxed{ 15 }
    assert got == want


@pytest.mark.parametrize("text", ["a3\nb5+3+5=8\n\\boxed{8}",     # no separator
                                  "a3->3+5=8\n\\boxed{8}",         # the first line adds
                                  "a3\nb5,3+5=8\n15"])             # no box
def test_a_response_outside_the_grammar_is_none(text):
    assert char_classes(text) is None


def test_a_token_takes_its_first_characters_part_and_eos_is_structure():
    pieces = ["a", "3", "\n", "b", "5", " so", "=", "8", " yes", "\n", "\\boxed", "{", "8", "}"]
    assert token_classes(pieces, eos=True) == [
        "direction", "arithmetic", "check", "arithmetic", "arithmetic", "separator", "form", "arithmetic",
        "check", "structure", "structure", "structure", "arithmetic", "structure", "structure"]
    assert token_classes(["a", "3", "??"], eos=False) == ["unparsed"] * 3


def test_shares_and_means_by_hand():
    vocab = {1: "a", 2: "3", 3: "\n", 4: "b", 5: "5", 6: ",", 7: "=", 8: "8", 9: "\\boxed{", 10: "}", 0: ""}
    # a 3 \n b 5 , = 8 \n \boxed{ 8 } EOS: direction 1.0, form 0.6, both check newlines 0.2, separator 0.4,
    # arithmetic (3, b, 5, 8, 8) 0.1 each, structure (\boxed{, }, EOS) 0.0
    ids = [[1, 2, 3, 4, 5, 6, 7, 8, 3, 9, 8, 10, 0]]
    ents = [[1.0, 0.1, 0.2, 0.1, 0.1, 0.4, 0.6, 0.1, 0.2, 0.0, 0.1, 0.0, 0.0]]
    split = entropy_by_class(ids, ents, lambda t: vocab[t[0]], eos_id=0)
    total = 2.9
    assert split["total"]["mean"] == pytest.approx(total / 13)
    assert split["direction"] == pytest.approx({"tokens": 1 / 13, "entropy": 1.0 / total, "mean": 1.0})
    assert split["check"] == pytest.approx({"tokens": 2 / 13, "entropy": 0.4 / total, "mean": 0.2})
    assert split["arithmetic"] == pytest.approx({"tokens": 5 / 13, "entropy": 0.5 / total, "mean": 0.1})
    assert split["structure"]["tokens"] == pytest.approx(3 / 13) and split["structure"]["entropy"] == 0.0
    assert split["unparsed"] == {"tokens": 0.0, "entropy": 0.0, "mean": 0.0}
    assert sum(split[c]["entropy"] for c in split if c != "total") == pytest.approx(1.0)
