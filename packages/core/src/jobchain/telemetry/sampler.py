"""Queue-stats sampling for the queue gauges, by one worker of the fleet.

Every instrumented worker runs a :class:`QueueStatsSampler`, but only one samples: each
``interval`` a sampler lists the registry's ``running`` workers that share its worker's
``name`` and samples ``client.queue_stats()`` only if its worker is the one that started
first (ties: the smallest id). The others publish no queue gauges, so the fleet reports
each figure once, and nothing needs a lock: when the sampling worker stops (or dies, and
the registry says so), the next oldest takes over at its next tick. A worker that just
started is listed after its first heartbeat (its sampler looks every half second until
then). A worker's sampler reports the job types that worker serves (zeros included); without
a worker (a process that only exports metrics) the sampler always samples, every type that
has jobs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING

from jobchain.entities import WorkerState
from jobchain.errors import InvalidArgumentError
from jobchain.stats import QueueStats

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.worker import Worker

log = logging.getLogger("jobchain.telemetry")

DEFAULT_SAMPLE_INTERVAL = 15.0
"""Seconds between two queue-stats samples (Prometheus scrapes every 15 s by default)."""


class QueueStatsSampler:
    """Samples ``client.queue_stats()`` every ``interval`` seconds while it runs, if elected.

    ``latest`` is the last sample, or None when this sampler is not the fleet's sampler (or
    its last sample is older than three intervals: the database is away). Use it as an async
    context manager, or :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self, client: Client, worker: Worker | None = None, *, interval: float = DEFAULT_SAMPLE_INTERVAL
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise InvalidArgumentError(f"interval must be a positive number of seconds, got {interval!r}")
        self.client = client
        self.worker = worker
        self.interval = float(interval)
        self.elected = False
        """Whether this sampler sampled at its last tick."""
        self._listed = worker is None  # its worker is in the registry (after its first heartbeat)
        self._latest: QueueStats | None = None
        self._sampled_at = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def latest(self) -> QueueStats | None:
        """The last sample while this sampler is elected and it is fresh, else None."""
        if self._latest is None or time.monotonic() - self._sampled_at > 3 * self.interval:
            return None
        return self._latest

    async def sample_once(self) -> QueueStats | None:
        """One tick: elect, then sample if elected. Returns the sample (None: not elected)."""
        self.elected = await self._is_elected()
        if not self.elected:
            self._latest = None
            return None
        worker = self.worker
        stats = await self.client.queue_stats(type_names=worker.type_names if worker is not None else ())
        self._latest = stats
        self._sampled_at = time.monotonic()
        return stats

    async def _is_elected(self) -> bool:
        worker = self.worker
        if worker is None:
            return True
        running = await self.client.list_workers(states=[WorkerState.RUNNING])
        peers = [w for w in running if w.name == worker.name]
        self._listed = any(w.id == worker.worker_id for w in peers)
        if not self._listed:
            return False
        first = min(peers, key=lambda w: (w.started_at, w.id))
        return first.id == worker.worker_id

    def start(self) -> None:
        """Start sampling in the background (the first tick is immediate)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="jobchain-queue-stats-sampler"
            )

    async def stop(self) -> None:
        """Stop sampling; ``latest`` becomes None."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._latest = None
        self.elected = False

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is away: keep the last sample until it is stale
                log.warning("queue stats sampling failed", exc_info=True)
            # Until its worker's first heartbeat lists it, look again soon rather than in a
            # whole interval: a fleet of one samples from its start.
            await asyncio.sleep(self.interval if self._listed else min(self.interval, 0.5))

    async def __aenter__(self) -> QueueStatsSampler:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
