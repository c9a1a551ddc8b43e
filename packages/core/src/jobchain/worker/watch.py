"""The worker's watch over long attempts that are not in staged mode.

A staged attempt listens for its job's ownership loss (and renews its lease) from the start.
An atomic attempt holds its job's row for the whole handler instead, and most finish within
milliseconds: a subscription each would cost the plain path a round trip to the broker per
job. So the worker keeps one watch for all of them: every ``after / 2`` seconds, while
attempts run, it looks at the running attempts (the slots already keep them by job id), and
one that has run ``after`` seconds without listening starts to (see
:meth:`AttemptRunner.watch`). A cancelled chain's atomic attempt thus sees its signal fire
with reason ``cancelled`` within about ``after`` seconds plus the notification's delivery;
without a notify adapter, at its next check (every lease renewal interval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from jobchain.worker.runner import WATCH_AFTER_SECONDS, AttemptRunner


class AttemptWatch:
    """Starts listening for the ownership loss of attempts that run longer than ``after`` seconds."""

    def __init__(self, runners: Callable[[], Iterable[object]], after: float = WATCH_AFTER_SECONDS) -> None:
        self._runners = runners
        self._after = after
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def poke(self) -> None:
        """An attempt started: make sure the watch runs (it ends by itself when none run)."""
        if self._task is None and not self._stopping:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="jobchain-attempt-watch")

    async def stop(self) -> None:
        """Stop watching (attempts already listening keep their subscriptions until they end)."""
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def check(self, now: float) -> None:
        """Start listening for every attempt that ran ``after`` seconds by ``now`` (loop time)."""
        for runner in list(self._runners()):
            if (
                isinstance(runner, AttemptRunner)
                and not runner.watched
                and runner.started_at is not None
                and now - runner.started_at >= self._after
            ):
                runner.watch()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._stopping:
                await asyncio.sleep(self._after / 2)
                runners = list(self._runners())
                if not runners:
                    return
                self.check(loop.time())
        finally:
            if self._task is asyncio.current_task():
                self._task = None
