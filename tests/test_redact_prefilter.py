"""The built-in maskers' prefilters skip RE2 only where it could not match: same output."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from sidecar.wire.redaction import BUILT_IN_PATTERNS, masker
from tests.fuzz_strategies import FUZZ

PIECES = st.sampled_from(
    [
        *("4111 1111 1111 1111", "4111-1111-1111-1111", "+44 20 7946 0958", "a.b@example.org"),
        *("@", "+", "1234", "12 34", "٣٤٥٦", "x", " ", "-", "\n", "order 12345678901234"),
    ]
)
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=12).map("".join)


@FUZZ
@given(TEXTS)
def test_prefilters_never_change_what_is_masked(text: str) -> None:
    for name in BUILT_IN_PATTERNS:
        fast = masker(name)
        assert fast.maybe is not None
        plain = dataclasses.replace(fast, maybe=None)
        assert fast.apply(text) == plain.apply(text), name


def test_texts_without_the_marker_character_skip_the_regex() -> None:
    assert masker("email").maybe is not None
    assert not masker("email").maybe("no address here")
    assert masker("card_number").maybe is not None
    assert masker("card_number").maybe("card 4111 1111 1111 1111")
    assert not masker("card_number").maybe("order 123")
    # Order numbers and amounts (fewer than 13 digits in a row) do not wake RE2 either.
    assert not masker("card_number").maybe("order A3235: 41.65 refunded, ref 2024-11-30 12:00")
