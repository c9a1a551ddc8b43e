"""A retry backoff whose delay no Schedule can hold is refused when it is built, not at a failure."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobchain import InvalidArgumentError
from jobchain.entities import MAX_DELAY, Schedule
from jobchain.worker import Backoff


def test_a_maximum_beyond_the_longest_delay_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="at most 36500 days"):
        Backoff(initial=timedelta(seconds=1), maximum=timedelta.max)


def test_the_longest_allowed_maximum_schedules_a_retry() -> None:
    backoff = Backoff(initial=timedelta(seconds=1), multiplier=10.0, maximum=MAX_DELAY)
    assert Schedule(after=backoff.delay(1000)).after == MAX_DELAY
