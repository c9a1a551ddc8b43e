"""Error fingerprints: what is masked, what is kept, and that messages differing only in their
values share one fingerprint."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobchain.entities import new_id
from jobchain.error_fingerprint import EMPTY, MAX_FINGERPRINT, error_fingerprint, first_line, mask_values

TABLE = [
    # (error type, message, fingerprint)
    (
        "CardExpired",
        "card for order ORD-10442 expired on 11/2026",
        "CardExpired: card for order <id> expired on <n>",
    ),
    ("KeyError", "'img'", "KeyError: '<v>'"),
    ("ValueError", 'bad input: missing field "sku"', 'ValueError: bad input: missing field "<v>"'),
    ("ValueError", "can't parse 'x' (it's odd)", "ValueError: can't parse '<v>' (it's odd)"),
    ("", "job 0193a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b lost its lease", "job <uuid> lost its lease"),
    ("", "job 0193A4B2-1C3D-7E4F-8A9B-0C1D2E3F4A5B lost", "job <uuid> lost"),
    ("TimeoutError", "upstream took longer than 30 s", "TimeoutError: upstream took longer than <n> s"),
    ("TimeoutError", "upstream took longer than 30s", "TimeoutError: upstream took longer than <id>"),
    (
        "RuntimeError",
        "at 2026-11-30T08:15:00Z, retry at 2026-11-30 08:16",
        "RuntimeError: at <time>, retry at <time>",
    ),
    ("RuntimeError", "deadline 2026-11-30T08:15:00.123+01:00 passed", "RuntimeError: deadline <time> passed"),
    ("MemoryError", "object at 0x7f3a9c0e1d20", "MemoryError: object at <hex>"),
    ("", "sha 9f86d081e4 mismatch, expected deadbeef", "sha <hex> mismatch, expected deadbeef"),
    ("", "user42 sent 3.5 MB to 10.0.0.1:8080", "<id> sent <n> MB to <n>"),
    ("", "rows 1,204 of 10,000 at 08:15:07", "rows <n> of <n> at <n>"),
    (
        "HTTPError",
        "HTTP 503 from https://api.example.com/v2/orders/77",
        "HTTPError: HTTP <n> from https://api.example.com/<id>/orders/<n>",
    ),
    ("Http404Error", "no page 12", "Http404Error: no page <n>"),  # the type is never masked
    ("", "  \n\n   first   line\t here  \nsecond line 42", "first line here"),
    ("StopIteration", "", "StopIteration"),
    ("StopIteration", None, "StopIteration"),
    ("", "", EMPTY),
    (None, "   \n ", EMPTY),
    ("", "naïve café №7 ٣ 'ü'", "naïve café №<n> ٣ '<v>'"),  # ASCII digits only; "٣" is kept
]


@pytest.mark.parametrize(("error_type", "message", "fingerprint"), TABLE)
def test_the_fingerprint_table(error_type: str | None, message: str | None, fingerprint: str) -> None:
    assert error_fingerprint(error_type, message) == fingerprint


def test_44_card_errors_differing_in_their_order_ref_share_one_fingerprint() -> None:
    messages = {f"card for order ORD-{10_400 + n} expired on {1 + n % 12}/2026" for n in range(44)}
    assert len(messages) == 44
    assert {error_fingerprint("CardExpired", m) for m in messages} == {
        "CardExpired: card for order <id> expired on <n>"
    }


def test_a_long_fingerprint_is_cut() -> None:
    fingerprint = error_fingerprint("ValueError", "word " * 100)
    assert len(fingerprint) == MAX_FINGERPRINT
    assert fingerprint.endswith("…")


def test_the_first_line_skips_blank_lines_and_collapses_whitespace() -> None:
    assert first_line("\n \t\n  a  b\r\nc") == "a b"
    assert first_line(None) == ""


_VALUES = st.one_of(
    st.integers(min_value=0).map(str),
    st.uuids().map(str),
    st.builds(new_id),
    st.integers(min_value=0, max_value=10**6).map(lambda n: f"ORD-{n}"),
    st.text(st.characters(blacklist_characters="'\n"), max_size=20).map(lambda t: f"'{t}'"),
    st.text(st.characters(blacklist_characters='"\n'), max_size=20).map(lambda t: f'"{t}"'),
    st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda f: f"{f:.3f}"),
    st.datetimes().map(lambda d: d.isoformat(timespec="seconds")),
)


MASKS = {"<n>", "<uuid>", "<id>", "<time>", "'<v>'", '"<v>"'}


@given(a=_VALUES, b=_VALUES)
def test_messages_differing_only_in_their_values_share_a_fingerprint(a: str, b: str) -> None:
    template = "could not charge {} for the order, giving up"
    left, right = error_fingerprint("E", template.format(a)), error_fingerprint("E", template.format(b))
    mask_a, mask_b = error_fingerprint("", a), error_fingerprint("", b)
    assert {mask_a, mask_b} <= MASKS  # each value is masked whole, never kept
    assert left == f"E: could not charge {mask_a} for the order, giving up"
    assert (left == right) == (mask_a == mask_b)


@given(st.text(max_size=300))
def test_masking_is_idempotent_and_the_fingerprint_is_one_bounded_line(text: str) -> None:
    once = mask_values(first_line(text))
    assert mask_values(once) == once
    fingerprint = error_fingerprint("E", text)
    assert "\n" not in fingerprint
    assert len(fingerprint) <= MAX_FINGERPRINT


@given(st.uuids())
def test_uuids_are_masked_whatever_their_case(value: uuid.UUID) -> None:
    assert error_fingerprint("", f"job {value} lost") == "job <uuid> lost"
    assert error_fingerprint("", f"job {str(value).upper()} lost") == "job <uuid> lost"
