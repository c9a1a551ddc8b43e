"""A clock that moves only when the test says so."""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta

from jobchain.errors import InvalidArgumentError


class FrozenClock:
    """A ``clock=`` for :func:`jobchain.connect`, :class:`~jobchain.Client` and
    :func:`~jobchain.testing.run_until_idle` that stands still until moved.

    Calling it returns the current (frozen) time, an aware UTC datetime. ``start``
    defaults to the real time at construction, truncated to whole seconds (every backend
    stores that exactly), so jobs written by code that reads the real clock are not in the
    clock's future. :meth:`advance` moves forward; :meth:`set` jumps to any time.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = _aware("start", start) if start is not None else datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self._now

    def now(self) -> datetime:
        """The clock's current time (the same as calling it)."""
        return self._now

    def advance(self, by: timedelta | float = 0.0, /, **delta: float) -> datetime:
        """Move forward by ``by`` (a timedelta or seconds) or ``timedelta`` keywords
        (``advance(minutes=5)``); return the new time. Negative amounts are refused."""
        if isinstance(by, bool) or not isinstance(by, (timedelta, int, float)):
            raise InvalidArgumentError(f"advance() takes a timedelta or seconds, got {by!r}")
        step = by if isinstance(by, timedelta) else _seconds(by)
        if delta:
            try:
                step += timedelta(**delta)
            except TypeError as error:
                raise InvalidArgumentError(f"advance() keywords are timedelta's: {error}") from None
        if step < timedelta(0):
            raise InvalidArgumentError(f"a clock moves forward only; use set() to go back (got {step})")
        with self._lock:
            self._now += step
            return self._now

    def set(self, to: datetime) -> datetime:
        """Jump to ``to`` (an aware datetime, earlier or later); return it in UTC."""
        moved = _aware("set()", to)
        with self._lock:
            self._now = moved
        return moved

    def __repr__(self) -> str:
        return f"FrozenClock({self._now.isoformat()})"


def _aware(what: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidArgumentError(f"{what} takes a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgumentError(f"{what} needs an aware datetime (tzinfo=UTC), got {value!r}")
    return value.astimezone(UTC)


def _seconds(value: float) -> timedelta:
    if math.isnan(value) or math.isinf(value):
        raise InvalidArgumentError(f"advance() needs a finite number of seconds, got {value!r}")
    return timedelta(seconds=value)
