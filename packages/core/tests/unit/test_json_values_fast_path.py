"""The fast check of every input and output agrees with the full one: whatever it lets through,
the full check accepts, and whatever the full check refuses, encoding refuses with its path."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobchain.errors import NotJsonSerializableError
from jobchain.json_values import _check_plain, _plain, encode_json

leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(alphabet=st.characters(codec=None), max_size=8)
    | st.binary(max_size=4)
    | st.frozensets(st.integers(), max_size=2)
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.dictionaries(st.text(alphabet=st.characters(codec=None), max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


def _full_refusal(value: object) -> str | None:
    try:
        _check_plain(value, "$")
    except NotJsonSerializableError as exc:
        return str(exc)
    return None


def _full_accepts(value: object) -> bool:
    return _full_refusal(value) is None


@settings(max_examples=400, deadline=None, database=None)
@given(values)
def test_the_fast_check_never_accepts_what_the_full_check_refuses(value: object) -> None:
    """Lone surrogates excepted: msgspec refuses those while encoding (the next property)."""
    refusal = _full_refusal(value)
    if _plain(value):
        assert refusal is None or "lone surrogate" in refusal, refusal


@settings(max_examples=400, deadline=None, database=None)
@given(values)
def test_encoding_refuses_exactly_what_the_full_check_refuses(value: object) -> None:
    """Beyond the full check, msgspec may refuse what it cannot encode (a huge int): never the
    reverse."""
    refusal: str | None = None
    try:
        encode_json(value)
    except NotJsonSerializableError as exc:
        refusal = str(exc)
    if not _full_accepts(value):
        assert refusal is not None
        assert "$" in refusal
    elif refusal is not None:
        assert "not JSON-serializable" in refusal, refusal


@pytest.mark.parametrize(
    "value",
    [{"a": [1, {"b": "x\x00"}]}, {"a\x00": 1}, [math.nan], {"s": {1, 2}}, {"b": b"x"}, {"t": "\ud800"}],
    ids=["nul-deep", "nul-key", "nan", "set", "bytes", "surrogate"],
)
def test_refusals_still_name_the_path(value: object) -> None:
    with pytest.raises(NotJsonSerializableError, match=r"\$"):
        encode_json(value)
