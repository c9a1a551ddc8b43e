"""Retry schedules as pure functions: exponential backoff with a cap, no hidden state."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from jobchain.entities import MAX_DELAY
from jobchain.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """``delay(attempt) = min(initial * multiplier ** (attempt - 1), maximum)``.

    The default (10 s doubling to 300 s) is the reference design's retry schedule.
    """

    initial: timedelta = timedelta(seconds=10)
    multiplier: float = 2.0
    maximum: timedelta = timedelta(seconds=300)

    def __post_init__(self) -> None:
        if self.initial < timedelta(0):
            raise InvalidArgumentError(f"Backoff.initial must not be negative, got {self.initial!r}")
        if self.maximum < self.initial:
            raise InvalidArgumentError("Backoff.maximum must be at least Backoff.initial")
        if self.maximum > MAX_DELAY:
            # Checked here: a failed attempt's Schedule(after=delay) would refuse it mid-failure.
            raise InvalidArgumentError(f"Backoff.maximum must be at most {MAX_DELAY.days} days")
        if not math.isfinite(self.multiplier) or self.multiplier < 1:
            raise InvalidArgumentError(
                f"Backoff.multiplier must be a finite number >= 1, got {self.multiplier!r}"
            )

    def delay(self, attempt: int) -> timedelta:
        """The wait before retrying after failed attempt number ``attempt`` (1-based)."""
        exponent = max(attempt, 1) - 1
        initial = self.initial.total_seconds()
        cap = self.maximum.total_seconds()
        # Cap the exponent so huge attempt counts never overflow a float.
        if initial == 0:
            return timedelta(0)
        limit = math.log(cap / initial, self.multiplier) if self.multiplier > 1 and cap > initial else 0
        if exponent >= limit + 1:
            return self.maximum
        return timedelta(seconds=min(initial * self.multiplier**exponent, cap))


DEFAULT_BACKOFF = Backoff()
DEFAULT_RECOVERY_BACKOFF = Backoff(
    initial=timedelta(milliseconds=500), multiplier=2.0, maximum=timedelta(seconds=5)
)
"""The worker loop's backoff after a database or broker failure: 0.5 s doubling to 5 s.

Kept low because heartbeats probe the database every couple of seconds anyway, and the
first one that gets through wakes the loop; a long cap would only idle a recovered worker.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseConfig:
    """How long a claim lasts and how often a running staged attempt renews it."""

    duration: timedelta = timedelta(seconds=60)
    renew_every: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        if self.duration <= timedelta(0):
            raise InvalidArgumentError(f"LeaseConfig.duration must be positive, got {self.duration!r}")
        if not timedelta(0) < self.renew_every < self.duration:
            raise InvalidArgumentError("LeaseConfig.renew_every must be positive and shorter than duration")


DEFAULT_LEASE = LeaseConfig()
