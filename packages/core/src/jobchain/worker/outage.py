"""Failures of the worker's repeated operations: logged once per streak, waited out safely."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable


class FailureStreak:
    """Counts consecutive failures of one repeated operation (a heartbeat, a reap, the loop).

    During a database outage these operations fail every few seconds; a line per failure
    buries everything else. The first failure of a streak is a WARNING, the rest go to
    DEBUG, and the first success after it writes one INFO line saying how long it lasted.
    """

    def __init__(
        self, logger: logging.Logger, what: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = logger
        self._what = what
        self._clock = clock
        self.failures = 0
        self._since = 0.0

    @property
    def failing(self) -> bool:
        """Whether the last attempt failed."""
        return self.failures > 0

    def failed(self, error: BaseException, detail: str = "") -> int:
        """Record a failure; return how many in a row (1 for the first)."""
        self.failures += 1
        suffix = f"; {detail}" if detail else ""
        if self.failures == 1:
            self._since = self._clock()
            self._log.warning(
                "%s failed (%s)%s; further failures are logged at DEBUG until it succeeds",
                self._what,
                error,
                suffix,
            )
        else:
            self._log.debug("%s failed again (%d in a row): %s%s", self._what, self.failures, error, suffix)
        return self.failures

    def succeeded(self) -> bool:
        """Record a success; return True if it ended a streak of failures."""
        if not self.failures:
            return False
        self._log.info(
            "%s works again after %d failure(s) over %.1f s",
            self._what,
            self.failures,
            max(self._clock() - self._since, 0.0),
        )
        self.failures = 0
        return True


async def wait_or_timeout(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` passed, whichever comes first.

    Not ``asyncio.wait_for(event.wait(), seconds)``: on Python 3.11 that swallows a
    cancellation that arrives as the event is set, and a worker task cancelled by ``stop()``
    would then sleep on. ``asyncio.timeout`` tells its own cancellation from the caller's.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
