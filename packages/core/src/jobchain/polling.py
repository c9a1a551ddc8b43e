"""How ``await_chain`` waits between two reads of a chain: the backoff and the wake-or-timeout.

With working notifications the completion wakes the wait and ``poll_interval`` (15 s by
default) is only the safety re-check. Without them (no notify backend, listening failed, or
the backend's delivery self-check reports it degraded) the wait polls from
:data:`POLL_FIRST` doubling to :data:`POLL_CAP`, so a completion is seen within a second at
most, and an idle wait costs about one read a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

POLL_FIRST = 0.05
"""Seconds before the first re-read of a chain when no notification can wake the wait."""

POLL_CAP = 1.0
"""The longest poll of a wait without notifications (``poll_interval`` lowers it further)."""

SYNC_POLL_FIRST = 0.01
"""The sync facade's first re-read (it always polls: its notify wake-ups cross threads)."""

WaitForWake = Callable[[asyncio.Event, float], Awaitable[bool]]
"""Waits until the event is set or the seconds pass; True when woken."""


class Backoff:
    """Poll intervals ``first, 2·first, 4·first, …`` capped at ``cap``; :meth:`reset` starts over.

    A ``cap`` below ``first`` is used as is, from the first poll on.
    """

    __slots__ = ("_cap", "_first", "_next")

    def __init__(self, first: float, cap: float) -> None:
        self._first = min(first, cap)
        self._cap = cap
        self._next = self._first

    def next(self) -> float:
        """The interval to wait now; the following one doubles (up to the cap)."""
        delay = self._next
        self._next = min(delay * 2, self._cap)
        return delay

    def reset(self) -> None:
        self._next = self._first


async def wait_for_wake(woken: asyncio.Event, seconds: float) -> bool:
    """Wait until ``woken`` is set or ``seconds`` pass; True when woken.

    An enclosing ``asyncio.timeout`` that expires meanwhile still reaches its owner: only this
    wait's own deadline is turned into False.
    """
    try:
        async with asyncio.timeout(seconds):
            await woken.wait()
    except TimeoutError:
        return False
    return True


__all__ = ["POLL_CAP", "POLL_FIRST", "SYNC_POLL_FIRST", "Backoff", "WaitForWake", "wait_for_wake"]
