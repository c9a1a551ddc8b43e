"""Queue-stats sampling for the queue gauges, by one reporter for the whole cluster.

Every instrumented worker runs a :class:`QueueStatsSampler`, but only one reports. At each
``interval`` a sampler lists the registry's ``running`` workers and samples
``client.queue_stats()`` only if its own worker is the *reporter*: the one that started
first (ties: the smallest id). With ``reporter="cluster"`` (the default) that is the oldest
running worker of the whole registry, whatever its name, so a sum over every scraped
instance counts each figure once. ``reporter="name"`` elects the oldest running worker of
each worker ``name`` instead (the rule before: one reporter per name, which double-counts
in a sum over names that serve the same types).

Nothing needs a lock: when the reporter stops (it is ``draining``, then ``stopped``) or
dies (its heartbeats are missed and the registry lists it ``dead``), the next oldest takes
over at its next tick. A worker that just started is listed after its first heartbeat (its
sampler looks every half second until then).

What a report holds: with ``reporter="cluster"``, every type that has jobs or is paused,
plus zeros for each type a running worker serves; with ``reporter="name"``, the types its
worker serves (zeros included).

A sampler without a worker (a process that runs no worker: a dedicated exporter) is not in
the registry, so it cannot be elected: it always reports (``reporter="always"``, its only
mode), every type as in ``"cluster"`` mode. Run one such process, and not alongside
reporting workers, or the sum counts each figure twice. ``"always"`` may also be given with
a worker (a fleet of one, or gauges read with ``max``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Final, Literal, get_args

from jobchain.entities import WorkerInfo, WorkerState
from jobchain.errors import InvalidArgumentError
from jobchain.stats import QueueStats, TypeStats

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.worker import Worker

log = logging.getLogger("jobchain.telemetry")

DEFAULT_SAMPLE_INTERVAL = 15.0
"""Seconds between two queue-stats samples (Prometheus scrapes every 15 s by default)."""

Reporter = Literal["cluster", "name", "always"]
"""Who reports the queue gauges: the oldest running worker of the cluster, of each worker
name, or this sampler at every tick (see :mod:`jobchain.telemetry.sampler`)."""

REPORTERS: Final[tuple[Reporter, ...]] = get_args(Reporter)
DEFAULT_REPORTER: Final[Reporter] = "cluster"
"""A worker's sampler: one reporter for the whole registry."""


def elect(running: Sequence[WorkerInfo], name: str | None = None) -> WorkerInfo | None:
    """The reporter among ``running`` workers (of ``name`` only, if given): the one that
    started first, ties broken by the smallest id; None when there is none."""
    peers = [w for w in running if name is None or w.name == name]
    return min(peers, key=lambda w: (w.started_at, w.id)) if peers else None


class QueueStatsSampler:
    """Samples ``client.queue_stats()`` every ``interval`` seconds while it runs, if elected.

    ``reporter`` says who reports (see :mod:`jobchain.telemetry.sampler`): ``"cluster"`` (a
    worker's default), ``"name"``, or ``"always"`` (the only mode without a ``worker``).
    ``latest`` is the last sample, or None when this sampler is not the reporter (or its
    last sample is older than three intervals: the database is away). Use it as an async
    context manager, or :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        client: Client,
        worker: Worker | None = None,
        *,
        interval: float = DEFAULT_SAMPLE_INTERVAL,
        reporter: Reporter | None = None,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise InvalidArgumentError(f"interval must be a positive number of seconds, got {interval!r}")
        if reporter is None:
            reporter = DEFAULT_REPORTER if worker is not None else "always"
        if reporter not in REPORTERS:
            raise InvalidArgumentError(f"reporter must be one of {', '.join(REPORTERS)}, got {reporter!r}")
        if worker is None and reporter != "always":
            raise InvalidArgumentError(
                f"reporter={reporter!r} needs a worker: a sampler without one is not in the worker "
                "registry, so it cannot be elected; it always reports (reporter='always')"
            )
        self.client = client
        self.worker = worker
        self.interval = float(interval)
        self.reporter: Reporter = reporter
        self.elected = False
        """Whether this sampler sampled at its last tick."""
        self.reporter_id: str | None = None
        """The id of the worker elected to report at the last tick (None: none is running,
        or this sampler always reports). A sampler that does not report names the one that does."""
        self._listed = worker is None  # its worker is in the registry (after its first heartbeat)
        self._told: tuple[bool, str | None] | None = None  # who reports, as last logged
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
        worker = self.worker
        running = await self.client.list_workers(states=[WorkerState.RUNNING])
        elected = self._elect(running)
        if self._listed and (elected, self.reporter_id) != self._told:
            self._told = (elected, self.reporter_id)
            self._log_reporter(elected)
        self.elected = elected
        if not elected:
            self._latest = None
            return None
        if self.reporter == "name" and worker is not None:
            stats = await self.client.queue_stats(type_names=worker.type_names)
        else:
            stats = _with_zeros(await self.client.queue_stats(), running)
        self._latest = stats
        self._sampled_at = time.monotonic()
        return stats

    def _elect(self, running: Sequence[WorkerInfo]) -> bool:
        worker = self.worker
        if worker is None:
            return True
        self._listed = any(w.id == worker.worker_id for w in running)
        if self.reporter == "always":
            return True
        first = elect(running, worker.name if self.reporter == "name" else None)
        self.reporter_id = first.id if first is not None else None
        return self._listed and self.reporter_id == worker.worker_id

    def _log_reporter(self, elected: bool) -> None:
        """Say who reports now, each time it changes: an operator reads it in every worker's log."""
        if self.reporter == "always":
            log.info("this process reports the queue gauges at every sample (reporter=always)")
        elif elected:
            log.info("this worker reports the queue gauges (reporter=%s)", self.reporter)
        else:
            log.info(
                "worker %s reports the queue gauges, not this one (reporter=%s)",
                self.reporter_id,
                self.reporter,
            )

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
        self._told = None

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


def _with_zeros(stats: QueueStats, running: Sequence[WorkerInfo]) -> QueueStats:
    """``stats`` (every type that has jobs) with zeros for the types running workers serve."""
    present = {t.type_name for t in stats.types}
    served = {name for w in running for name in w.type_names} - present
    if not served:
        return stats
    types = [*stats.types, *(TypeStats(type_name=name) for name in served)]
    return dataclasses.replace(stats, types=tuple(sorted(types, key=lambda t: t.type_name)))
