"""Cursor decoding under hostile input: a forged or tampered cursor is an InvalidCursorError,
never a raw exception, and what it lets through is a position every backend can bind
(an int64, a short storable string, a storable id)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobchain.contracts import ChainJobsList, ChainsList, JobsList
from jobchain.errors import InvalidCursorError
from jobchain.pagination import MAX_CURSOR_CHARS, decode_cursor, encode_cursor, query_fingerprint
from jobchain.stored_text import unstorable_reason

INT64 = (-(2**63), 2**63 - 1)
LISTINGS = [ChainsList(), JobsList(), ChainJobsList(chain_id="c")]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def forge(params: Any, payload: object) -> Any:
    raw = json.dumps(payload).encode()
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return type(params)(**{**_fields(params), "cursor": cursor})


def _fields(params: Any) -> dict[str, Any]:
    return {name: getattr(params, name) for name in params.__dataclass_fields__ if name != "cursor"}


def _check(params: Any) -> None:
    try:
        position = decode_cursor(params)
    except InvalidCursorError:
        return
    assert position is not None
    sort_value, item_id = position
    if isinstance(sort_value, int):
        assert not isinstance(sort_value, bool)
        assert INT64[0] <= sort_value <= INT64[1]
    else:
        assert isinstance(sort_value, str)
        assert len(sort_value) <= 64
        assert unstorable_reason(sort_value) is None
    assert isinstance(item_id, str)
    assert unstorable_reason(item_id) is None
    assert len(item_id) <= 255


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(LISTINGS) - 1), key=json_values, item=json_values)
def test_a_tampered_position_is_refused_or_bindable(index: int, key: object, item: object) -> None:
    params = LISTINGS[index]
    _check(forge(params, {"q": query_fingerprint(params), "k": [key, item]}))


@settings(max_examples=200, deadline=None, database=None)
@given(index=st.integers(0, len(LISTINGS) - 1), payload=json_values)
def test_any_json_payload_is_refused_or_bindable(index: int, payload: object) -> None:
    _check(forge(LISTINGS[index], payload))


@settings(max_examples=200, deadline=None, database=None)
@given(index=st.integers(0, len(LISTINGS) - 1), cursor=st.text(max_size=200))
def test_any_text_is_refused_or_bindable(index: int, cursor: str) -> None:
    params = LISTINGS[index]
    if not cursor:
        return
    _check(type(params)(**{**_fields(params), "cursor": cursor}))


@pytest.mark.parametrize(
    ("key", "item"),
    [
        (2**70, "id"),
        (-(2**64), "id"),
        (True, "id"),
        ("2026-01-01T00:00:00+00:00", "id\x00"),
        ("2026-01-01T00:00:00+00:00\ud800", "id"),
        ("x" * 65, "id"),
        ("2026-01-01T00:00:00+00:00", "i" * 256),
        (1.5, "id"),
    ],
    ids=["int-too-big", "int-too-small", "bool", "nul-id", "surrogate-key", "long-key", "long-id", "float"],
)
def test_hostile_positions_are_invalid_cursor_errors(key: object, item: object) -> None:
    params = ChainsList()
    with pytest.raises(InvalidCursorError):
        decode_cursor(forge(params, {"q": query_fingerprint(params), "k": [key, item]}))


def test_a_cursor_longer_than_the_limit_is_refused_without_echoing_it() -> None:
    params = ChainsList()
    long = encode_cursor(params, "2026-01-01T00:00:00+00:00", "id") + "A" * MAX_CURSOR_CHARS
    with pytest.raises(InvalidCursorError) as info:
        decode_cursor(ChainsList(cursor=long))
    assert long not in str(info.value)


def test_real_cursors_still_decode() -> None:
    params = ChainsList()
    cursor = encode_cursor(params, "2026-01-01T00:00:00+00:00", "0193-id")
    assert decode_cursor(ChainsList(cursor=cursor)) == ("2026-01-01T00:00:00+00:00", "0193-id")
    cursor = encode_cursor(ChainJobsList(chain_id="c"), 2**63 - 1, "id")
    assert decode_cursor(ChainJobsList(chain_id="c", cursor=cursor)) == (2**63 - 1, "id")
