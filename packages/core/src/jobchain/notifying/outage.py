"""Once-per-outage logging and the back-off window during which the broker is not retried."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class Outage:
    """Tracks whether a broker path (commands or subscriptions) is down.

    The first failure of an outage logs one warning; later failures of the same outage log
    nothing, and the first success after it logs one info line. While down, callers skip the
    broker until ``retry_interval`` has passed since the last failure, so an outage costs one
    connection attempt per interval instead of one per call.
    """

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        *,
        retry_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what = what
        self._logger = logger
        self._retry_interval = retry_interval
        self._clock = clock
        self._down = False
        self._retry_at = 0.0
        self.closing = False
        """Set by the owner while it shuts down, so its own disconnect is not reported as an outage."""

    @property
    def down(self) -> bool:
        return self._down

    def should_skip(self) -> bool:
        """True while down and inside the back-off window: don't touch the broker now."""
        return self._down and self._clock() < self._retry_at

    def failed(self, error: BaseException) -> None:
        self._retry_at = self._clock() + self._retry_interval
        if not self._down:
            self._down = True
            self._logger.warning(
                "%s unreachable (%s: %s); notifications are dropped and wake hints fail open "
                "until it is back, so workers fall back to polling",
                self._what,
                type(error).__name__,
                error,
            )

    def recovered(self) -> None:
        if self._down:
            self._down = False
            self._logger.info("%s reachable again", self._what)
