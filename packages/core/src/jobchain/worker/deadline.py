"""Handler deadlines: a job type's ``timeout``, distinct from the lease.

The lease says the worker is alive (it is renewed while the handler runs); the deadline says
how long the handler may run at all. It measures the handler: its clock starts when the
handler is called and stops when it returns, and it stands still while the handler waits
for jobchain's own work on the attempt — the transaction ``prepare`` opens (and, staged,
commits), the completion ``complete``/``continue_with``/``wait_for`` writes and the group
commit it waits for. Claiming the job before and committing the attempt after are outside
it too. What the handler does itself (its own queries and calls, ``start_chain``,
``blockers()``, a ``prepare``/``complete`` callback) counts.

Past the deadline, the attempt's abort signal fires with :attr:`AbortReason.TIMEOUT`; a
handler that does not return within a short grace is cancelled; the attempt then counts as a
failed, retryable attempt with :class:`~jobchain.errors.JobTimeoutError` recorded (and uses
one of the job's attempts). Only such an attempt is reported as timed out
(``job_timed_out``, metric ``jobchain.jobs.timed_out``): a handler that returned in time is
not, however long its completion then takes to commit.

A synchronous handler runs in a thread, which Python cannot stop: its clock runs from the
moment the thread calls it (not while it waits for a free thread) until it returns; past the
deadline its attempt fails the same way, and whatever the thread returns later is ignored.
Such a handler should check ``attempt.signal.aborted`` now and then and return early.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from jobchain.errors import JobTimeoutError
from jobchain.worker.abort import AbortReason, AbortSignal, AttemptAbortedError

T = TypeVar("T")

TIMEOUT_GRACE_SECONDS = 1.0
"""After the deadline, how long a handler whose signal fired may take to return (at most the
timeout itself, so a short deadline gets a short grace)."""

INJECTED_CLOCK_CHECK_SECONDS = 0.05
"""With an injected clock (``Worker.monotonic``, in tests), how often the deadline reads it:
such a clock need not move with the event loop's."""


class Deadline:
    """Runs one handler under its deadline (see the module docstring).

    :meth:`run` runs the attempt's work; :meth:`timed` (or :meth:`timed_in_thread`) wraps the
    handler call inside it, which starts and stops the clock; ``with deadline:`` stops the
    clock for jobchain's own work the handler waits for.
    """

    __slots__ = (
        "_clock",
        "_excluded",
        "_failed",
        "_fired",
        "_grace",
        "_job_id",
        "_loop",
        "_returned_at",
        "_running_since",
        "_seconds",
        "_signal",
        "_spent",
        "_started",
        "_stopped",
        "_task",
        "_timer",
    )

    def __init__(
        self,
        job_id: str,
        timeout: timedelta,
        signal: AbortSignal,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._job_id = job_id
        self._seconds = timeout.total_seconds()
        self._signal = signal
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._started = False
        self._stopped = False
        self._fired = False
        self._failed = False
        self._excluded = 0
        self._spent = 0.0  # handler time before the current stretch
        self._running_since: float | None = None  # clock time the current stretch began
        self._returned_at: float | None = None  # clock time a threaded handler returned

    @property
    def fired(self) -> bool:
        """Whether the deadline passed while the handler ran."""
        return self._fired

    @property
    def failed(self) -> bool:
        """Whether :meth:`run` ended the attempt with :class:`JobTimeoutError`: the handler was
        still running at its deadline and its job was left unfinished."""
        return self._failed

    @property
    def seconds(self) -> float:
        """The timeout, in seconds."""
        return self._seconds

    @property
    def elapsed(self) -> float:
        """Handler time so far (excluded stretches not counted), in seconds."""
        since = self._running_since
        if since is None:
            return self._spent
        end = self._returned_at if self._returned_at is not None else self._now()
        return self._spent + max(0.0, end - since)

    def error(self) -> JobTimeoutError:
        """The error recorded for the timed-out attempt."""
        return JobTimeoutError(self._job_id, self._seconds)

    def _fail(self) -> JobTimeoutError:
        self._failed = True
        return self.error()

    # ------------------------------------------------------------ the clock

    def _now(self) -> float:
        clock = self._clock
        return clock() if clock is not None else time.monotonic()

    def start(self) -> None:
        """The handler was called: start the clock (once; later calls do nothing)."""
        self._begin(self._now())

    def _begin(self, at: float) -> None:
        if self._started or self._stopped:
            return
        self._started = True
        if self._excluded == 0:
            self._running_since = at
            self._arm()

    def stop(self) -> None:
        """The handler returned (or raised): stop the clock for good."""
        if self._stopped:
            return
        self._pause()
        self._stopped = True

    async def timed(self, call: Coroutine[Any, Any, T]) -> T:
        """Await the handler's coroutine ``call`` with the clock running."""
        self.start()
        try:
            return await call
        finally:
            self.stop()

    def timed_in_thread(self, handler: Callable[[Any], T]) -> Callable[[Any], T]:
        """``handler`` timed from inside the thread that runs it: the clock starts when the
        thread calls it and stops when it returns (:meth:`stop` then follows on the loop)."""
        loop = asyncio.get_running_loop()

        def timed(arg: Any) -> T:
            loop.call_soon_threadsafe(self._begin, self._now())
            try:
                return handler(arg)
            finally:
                self._returned_at = self._now()

        return timed

    def __enter__(self) -> Deadline:
        """Stop the clock while jobchain works for the handler (nestable)."""
        self._excluded += 1
        if self._excluded == 1:
            self._pause()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._excluded -= 1
        if self._excluded == 0 and self._started and not self._stopped and not self._fired:
            self._running_since = self._now()
            self._arm()

    def _pause(self) -> None:
        since = self._running_since
        if since is not None:
            self._spent = self.elapsed
            self._running_since = None
        self._disarm()

    def _arm(self) -> None:
        self._disarm()
        remaining = self._seconds - self.elapsed
        if remaining <= 0:
            self._expire()
            return
        if self._clock is not None:
            remaining = min(remaining, INJECTED_CLOCK_CHECK_SECONDS)
        loop = self._loop or asyncio.get_running_loop()
        self._timer = loop.call_later(remaining, self._check)

    def _disarm(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _check(self) -> None:
        self._timer = None
        if self._running_since is None or self._stopped or self._fired:
            return
        if self.elapsed >= self._seconds:
            self._expire()
        elif self._returned_at is None:
            self._arm()
        # else: a threaded handler returned in time; stop() follows on the loop.

    def _expire(self) -> None:
        if self._fired or self._task is None:
            return
        self._fired = True
        self._disarm()
        self._signal.abort(AbortReason.TIMEOUT)
        loop = self._loop or asyncio.get_running_loop()
        self._grace = loop.call_later(min(TIMEOUT_GRACE_SECONDS, self._seconds), self._task.cancel)

    # ------------------------------------------------------------ the attempt

    async def run(self, work: Coroutine[Any, Any, None], unfinished: Callable[[], bool]) -> None:
        """Await ``work``; past the deadline, signal, then cancel it after the grace.

        The clock runs only inside :meth:`timed` / :meth:`timed_in_thread` and outside
        ``with deadline:``. Raises JobTimeoutError when the deadline passed and the handler
        then was cancelled, stopped because of the signal, or returned, with its job
        ``unfinished()`` (no completion, or one not yet committed: it is rolled back).
        """
        self._loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(work)
        self._task = task
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelled_from_outside = current is not None and current.cancelling() > 0
            if self._fired and not cancelled_from_outside:
                if unfinished():
                    raise self._fail() from None
                return  # its job was finished (and committed) before: cancelling it undid nothing
            raise
        except AttemptAbortedError as aborted:
            if aborted.reason is AbortReason.TIMEOUT:
                raise self._fail() from aborted
            raise
        finally:
            self.stop()
            grace, self._grace = self._grace, None
            if grace is not None:
                grace.cancel()
        if self._fired and self._signal.reason is AbortReason.TIMEOUT and unfinished():
            raise self._fail()
