"""JSON numbers keep their type through ``jsonb`` (issue 34, finding 14).

``jsonb`` stores a number as ``numeric``: ``1e+16`` (Python's text for the float 1e16) parses
as the integer 10000000000000000, with scale 0, and comes back without a decimal point, so
``json.loads`` returned an int. ``json_text`` writes such floats positionally with a ``.0``;
these cases send its output through the real server's ``jsonb`` and read it back.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobchain_postgres.rows import json_text

from .conftest import conninfo

pytestmark = pytest.mark.pg_connections(1)

EDGES = [1e16, 1.5e16, -1e17, 1e300, -1e300, sys.float_info.max, 1.5e-300, 5e-324, 1e-5, 2.0**53, 0.0, 3.0]


@pytest.fixture(scope="module")
def connection(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as conn:
        yield conn


def through_jsonb(connection: psycopg.Connection[Any], value: Any) -> Any:
    """``value`` encoded by ``json_text``, stored as ``jsonb`` by the server, read back."""
    row = connection.execute("SELECT %s::text::jsonb", [json_text(value)]).fetchone()
    assert row is not None
    return row[0]


def typed(value: Any) -> Any:
    """Every number as (type name, value): 1e16 and 10**16 compare different."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, (bool, int, float)):
        return (type(value).__name__, value)
    return value


@pytest.mark.parametrize("number", EDGES, ids=repr)
def test_a_float_comes_back_a_float_with_its_value(
    connection: psycopg.Connection[Any], number: float
) -> None:
    [back] = through_jsonb(connection, [number])
    assert type(back) is float
    assert back == number


def test_ints_stay_ints_and_text_that_looks_like_a_float_is_left_alone(
    connection: psycopg.Connection[Any],
) -> None:
    value = {"1e+16": "1e+16", "n": 10**17, "neg": -(2**63), "s": 'say "2e+20", 3e+4 \\"', "f": 2e20}
    back = through_jsonb(connection, value)
    assert typed(back) == typed(value)


def test_a_document_without_an_exponent_is_the_plain_json_text() -> None:
    value = {"n": 1, "f": 1.5, "s": "type+name 1e"}
    assert json_text(value) == json.dumps(value, allow_nan=False, separators=(",", ":"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8))
def test_any_finite_float_round_trips_through_jsonb(
    connection: psycopg.Connection[Any], numbers: list[float]
) -> None:
    back = through_jsonb(connection, numbers)
    assert [type(n) for n in back] == [float] * len(numbers)
    # jsonb's numeric has no negative zero: -0.0 comes back 0.0 (equal, sign lost).
    assert back == numbers
    assert all(math.copysign(1, b) == math.copysign(1, n) for b, n in zip(back, numbers, strict=True) if n)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(alphabet='e+-.0123456789"\\ xE'),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(alphabet='e+1."', max_size=4), children, max_size=4)
        ),
        max_leaves=16,
    )
)
def test_any_json_document_round_trips_with_its_number_types(
    connection: psycopg.Connection[Any], value: Any
) -> None:
    assert typed(through_jsonb(connection, value)) == typed(value)
