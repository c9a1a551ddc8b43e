"""Generated job ids: canonical UUID version 7, unique, ordered by creation time."""

from __future__ import annotations

import time
import uuid

from hypothesis import given
from hypothesis import strategies as st

from jobchain.entities import new_id, validate_id


def test_new_ids_are_canonical_version_7_uuids() -> None:
    for _ in range(1000):
        value = new_id()
        parsed = uuid.UUID(value)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert validate_id(value) == value  # canonical lowercase form


def test_new_ids_are_unique() -> None:
    ids = [new_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)


def test_new_ids_start_with_their_creation_time() -> None:
    before = time.time_ns() // 1_000_000
    first = new_id()
    time.sleep(0.002)
    second = new_id()
    after = time.time_ns() // 1_000_000
    stamps = [uuid.UUID(value).int >> 80 for value in (first, second)]
    assert before <= stamps[0] < stamps[1] <= after
    assert first < second  # text order follows time order across milliseconds


@given(st.uuids())
def test_any_canonical_uuid_is_a_valid_id(value: uuid.UUID) -> None:
    assert validate_id(str(value)) == str(value)
