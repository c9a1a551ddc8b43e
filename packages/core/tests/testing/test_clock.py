"""FrozenClock: moves only when told, refuses what would make time ambiguous."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobchain.errors import InvalidArgumentError
from jobchain.testing import FrozenClock

from .conftest import START


def test_it_stands_still_until_moved() -> None:
    clock = FrozenClock(START)
    assert clock() == clock.now() == START
    assert clock.advance(90) == START + timedelta(seconds=90)
    assert clock.advance(timedelta(minutes=1), seconds=30) == START + timedelta(minutes=3)
    assert clock.advance(hours=1) == START + timedelta(hours=1, minutes=3)
    assert clock.set(START) == START
    assert clock() == START


def test_the_default_start_is_now_in_whole_seconds() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    clock = FrozenClock()
    assert before <= clock() <= datetime.now(UTC)
    assert clock().microsecond == 0
    assert clock().tzinfo is UTC


def test_other_timezones_are_kept_as_utc() -> None:
    paris_summer = timezone(timedelta(hours=2))
    clock = FrozenClock(datetime(2031, 5, 6, 14, 1, tzinfo=paris_summer))
    assert clock() == START
    assert clock().tzinfo is UTC


@pytest.mark.parametrize("bad", [-1, timedelta(seconds=-1), float("nan"), "10", True])
def test_advance_refuses_going_back_or_non_durations(bad: object) -> None:
    clock = FrozenClock(START)
    with pytest.raises(InvalidArgumentError):
        clock.advance(bad)  # type: ignore[arg-type]
    assert clock() == START


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="aware"):
        FrozenClock(datetime(2031, 1, 1))
    with pytest.raises(InvalidArgumentError, match="aware"):
        FrozenClock(START).set(datetime(2031, 1, 1))
    with pytest.raises(InvalidArgumentError, match="keywords"):
        FrozenClock(START).advance(fortnights=1)
