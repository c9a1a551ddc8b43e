"""Handler deadlines: a job type's ``timeout``, distinct from the lease.

The lease says the worker is alive (it is renewed while the handler runs); the deadline says
how long the handler may run at all. Past it, the attempt's abort signal fires with
:attr:`AbortReason.TIMEOUT`; a handler that does not return within a short grace is
cancelled; the attempt then counts as a failed, retryable attempt with
:class:`~jobchain.errors.JobTimeoutError` recorded (and uses one of the job's attempts).

A synchronous handler runs in a thread, which Python cannot stop: its attempt fails the same
way, and whatever the thread returns later is ignored. Such a handler should check
``attempt.signal.aborted`` now and then and return early.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from jobchain.errors import JobTimeoutError
from jobchain.worker.abort import AbortReason, AbortSignal, AttemptAbortedError

TIMEOUT_GRACE_SECONDS = 1.0
"""After the deadline, how long a handler whose signal fired may take to return (at most the
timeout itself, so a short deadline gets a short grace)."""


class Deadline:
    """Runs one handler under its deadline (see the module docstring)."""

    __slots__ = ("_fired", "_job_id", "_on_expired", "_seconds", "_signal")

    def __init__(
        self,
        job_id: str,
        timeout: timedelta,
        signal: AbortSignal,
        on_expired: Callable[[], None] | None = None,
    ) -> None:
        self._job_id = job_id
        self._seconds = timeout.total_seconds()
        self._signal = signal
        self._on_expired = on_expired
        self._fired = False

    @property
    def fired(self) -> bool:
        """Whether the deadline passed while the handler ran."""
        return self._fired

    def error(self) -> JobTimeoutError:
        """The error recorded for the timed-out attempt."""
        return JobTimeoutError(self._job_id, self._seconds)

    async def run(self, work: Coroutine[Any, Any, None], unfinished: Callable[[], bool]) -> None:
        """Await ``work``; past the deadline, signal, then cancel it after the grace.

        Raises JobTimeoutError when the deadline passed and the handler then was cancelled,
        stopped because of the signal, or returned, with its job ``unfinished()`` (no
        completion, or one not yet committed: it is rolled back).
        """
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(work)
        grace: list[asyncio.TimerHandle] = []

        def expire() -> None:
            self._fired = True
            self._signal.abort(AbortReason.TIMEOUT)
            if self._on_expired is not None:
                self._on_expired()
            grace.append(loop.call_later(min(TIMEOUT_GRACE_SECONDS, self._seconds), task.cancel))

        timer = loop.call_later(self._seconds, expire)
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelled_from_outside = current is not None and current.cancelling() > 0
            if self._fired and not cancelled_from_outside:
                if unfinished():
                    raise self.error() from None
                return  # its job was finished (and committed) before: cancelling it undid nothing
            raise
        except AttemptAbortedError as aborted:
            if aborted.reason is AbortReason.TIMEOUT:
                raise self.error() from aborted
            raise
        finally:
            timer.cancel()
            for handle in grace:
                handle.cancel()
        if self._fired and self._signal.reason is AbortReason.TIMEOUT and unfinished():
            raise self.error()
