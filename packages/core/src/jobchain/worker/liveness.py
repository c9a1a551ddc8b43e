"""The worker's own view of whether the fleet may presume it dead, on its monotonic clock.

Another worker's heartbeat marks this one dead, and hands on every job it holds whatever
their leases, once its registry row's ``alive_until`` has passed: ``alive_for`` after the
database wrote the last heartbeat. That write happened after the heartbeat was *sent*, so the
worker counts its liveness deadline from the moment its last confirmed heartbeat was sent,
less the safety margin of :mod:`jobchain.worker.local_deadline`. Past the deadline (a stall:
a long GC pause, a handler blocking the event loop, a frozen VM, a partition) it treats every
job as lost: it aborts their attempts (``lease_expired``), claims nothing and starts nothing
until a heartbeat is confirmed again. If nobody presumed it dead meanwhile, its leases still
hold and the buffered jobs start then; if someone did, the heartbeat says so and the worker
rejoins (:mod:`jobchain.worker.heartbeat`).

Before its first confirmed heartbeat a worker has no row, and after it learned it was
presumed dead its row is already dead: nobody can mark it dead then, so no deadline applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from jobchain.worker.local_deadline import local_deadline

log = logging.getLogger("jobchain.worker")

WATCH_STEP = 0.5
"""Seconds between two looks at the deadline, at most."""


class Liveness:
    """The liveness deadline of one worker, and a watch that acts when it passes."""

    def __init__(
        self,
        worker_id: str,
        alive_for: float,
        *,
        on_lapsed: Callable[[], None],
        on_restored: Callable[[], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._alive_for = alive_for
        self._on_lapsed = on_lapsed
        self._on_restored = on_restored
        self.clock = clock
        """The monotonic clock (None: the event loop's); tests inject one."""
        self.deadline: float | None = None
        """The monotonic time after which others may presume this worker dead (None: nobody can)."""
        self._moved = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reported = False
        self.lapses = 0
        """Times the deadline passed with no heartbeat confirmed."""

    def now(self) -> float:
        """The liveness clock's time: a heartbeat's sending time is read from it."""
        return self.clock() if self.clock is not None else asyncio.get_running_loop().time()

    def lapsed(self) -> bool:
        """Whether the deadline has passed: others may have handed this worker's jobs on."""
        deadline = self.deadline
        return deadline is not None and self.now() >= deadline

    def confirmed(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was written: the deadline moves on from there."""
        deadline = local_deadline(sent_at, self._alive_for)
        if self.deadline is None or deadline > self.deadline:
            self.deadline = deadline
        self._moved.set()

    def forget(self) -> None:
        """The row is dead or stopped: nobody can presume this worker dead any more."""
        self.deadline = None
        self._moved.set()

    def start(self) -> None:
        """Watch the deadline on a task of its own."""
        self._task = asyncio.create_task(self._watch(), name=f"jobchain-liveness-{self._worker_id}")

    async def stop(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        while True:
            self._moved.clear()
            if self.lapsed():
                self._lapse()
            elif self._reported:
                self._restore()
            deadline = self.deadline
            if deadline is None or self._reported:
                await self._moved.wait()
                continue
            # Past the deadline the next round reports it; a confirmation meanwhile moves it on.
            # Checked at least every WATCH_STEP: an injected clock can jump.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(max(deadline - self.now(), 0.0) + 0.001, WATCH_STEP)):
                    await self._moved.wait()

    def _lapse(self) -> None:
        if self._reported:
            return
        self._reported = True
        self.lapses += 1
        log.warning(
            "worker %s has had no heartbeat confirmed for %.1f s: other workers may presume it dead and "
            "hand its jobs on, so it aborts its attempts and starts nothing until a heartbeat gets through",
            self._worker_id,
            self._alive_for,
        )
        self._on_lapsed()

    def _restore(self) -> None:
        self._reported = False
        log.info("worker %s has a heartbeat confirmed again: it claims and starts jobs", self._worker_id)
        self._on_restored()


__all__ = ["Liveness"]
