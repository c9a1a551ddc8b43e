"""The reaper: returns running jobs whose lease expired to ``pending``, on a timer of its own.

It runs when a reap is due, never only when a claim came back empty (under a backlog claims
never do): the heartbeat reports when the earliest lease held by another worker expires, and
the reaper sleeps until then. It also runs once at start and at least every
``safety_interval`` seconds (the worker's ``poll_interval``) in case a heartbeat could not say.
A reap takes up to ``batch`` jobs and repeats while a full batch came back. One reaper task per
worker, so at most one reap statement is in flight per worker, and a saturated claim loop
never holds it back.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from jobchain.contracts import JobsReapExpired
from jobchain.entities import Job, RescueReason
from jobchain.errors import SchemaNotMigratedError
from jobchain.worker.backoff import Backoff
from jobchain.worker.outage import FailureStreak, wait_or_timeout
from jobchain.worker.rescues import Emit, emit_rescued, job_list, publish_rescued

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")

REAP_BATCH = 100
"""Jobs one reap statement returns to pending at most; the reaper repeats while it gets a full batch."""

EXPIRY_MARGIN = 0.01
"""Seconds after a reported lease expiry the reap runs, so the lease has surely passed."""


class Reaper:
    """Reaps expired leases of ``type_names`` when due; see the module docstring."""

    def __init__(
        self,
        client: Client,
        type_names: list[str],
        worker_id: str,
        *,
        exclude: Callable[[], list[str]],
        on_reaped: Callable[[], None],
        emit: Emit,
        safety_interval: float,
        recovery: Backoff,
        batch: int = REAP_BATCH,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._client = client
        self._type_names = type_names
        self._worker_id = worker_id
        self._exclude = exclude
        self._on_reaped = on_reaped
        self._emit = emit
        self._safety_interval = safety_interval
        self._recovery = recovery
        self._batch = batch
        self._clock = clock
        self._margin = EXPIRY_MARGIN + client.state.time_precision.total_seconds()
        self._streak = FailureStreak(log, f"worker {worker_id} reaper", clock=self._now)
        # Two reasons to reap: a lease the heartbeat saw expiring, and the safety timer.
        self._lease_due = math.inf
        self._safety_due = -math.inf  # once at start
        self._changed = asyncio.Event()
        self._one_at_a_time = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.reaps = 0
        """Reap statements run so far."""

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    @property
    def due_at(self) -> float:
        """When the next reap runs (the clock's time)."""
        return min(self._lease_due, self._safety_due)

    def lease_expires_in(self, delay: timedelta | None) -> None:
        """The earliest lease another worker holds expires in ``delay`` (None: no such lease).

        Each heartbeat's answer replaces the last one: leases are renewed, so an older
        answer may name an expiry that no longer holds.
        """
        due = math.inf if delay is None else self._now() + max(delay.total_seconds(), 0.0) + self._margin
        if due != self._lease_due:
            self._lease_due = due
            self._changed.set()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Run the reaper task."""
        self._task = asyncio.create_task(self._run(), name=f"jobchain-reaper-{self._worker_id}")

    async def stop(self) -> None:
        """Stop the reaper task (a reap in flight is cancelled; its transaction rolls back)."""
        task, self._task = self._task, None
        # The flag as well as the cancellation: a driver may turn a cancellation that lands
        # inside a statement into an error of its own, which the loop would retry.
        self._stopping = True
        self._changed.set()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stopping:
            wait = self.due_at - self._now()
            if wait > 0:
                self._changed.clear()
                await wait_or_timeout(self._changed, wait)
                continue
            started = self._now()
            try:
                await self.reap()
            except asyncio.CancelledError:
                raise
            except SchemaNotMigratedError:
                return  # the loop stops the worker on the same error
            except Exception as error:
                failures = self._streak.failed(error, "expired leases wait for the next try")
                self._emit(
                    "worker_error", {"error": repr(error), "operation": "jobs_reap_expired"}, log_line=False
                )
                self._safety_due = self._now() + self._recovery.delay(failures).total_seconds()
                # A lease reported expired stays due, but after the backoff too: else a reap that
                # keeps failing would run again at once, forever (and starve the event loop when
                # the failure takes no I/O).
                self._lease_due = max(self._lease_due, self._safety_due)
                continue
            self._streak.succeeded()
            self._safety_due = self._now() + self._safety_interval
            if self._lease_due <= started:
                self._lease_due = math.inf  # consumed; the next heartbeat reports the next one

    # ------------------------------------------------------------------ one reap

    async def reap(self) -> list[Job]:
        """Reap now: batches of up to ``batch`` jobs while full ones come back."""
        reaped: list[Job] = []
        async with self._one_at_a_time:
            while True:
                batch = await self._reap_batch()
                reaped += batch
                if len(batch) < self._batch or self._stopping:
                    return reaped

    async def _reap_batch(self) -> list[Job]:
        # One operation: in autocommit where the adapter can (no BEGIN and COMMIT round trips).
        async with self._client.transaction(autocommit=True) as tx:
            reaped = await tx.state.jobs_reap_expired(
                JobsReapExpired(
                    type_names=self._type_names, exclude_job_ids=self._exclude(), limit=self._batch
                )
            )
            publish_rescued(tx.hooks, reaped)
        self.reaps += 1
        if reaped:
            holders = sorted({job.rescued_from or "unknown" for job in reaped})
            named = ", ".join(holders[:5]) + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")
            log.info(
                "reaped %d job(s) whose lease expired (held by %s); they run again: %s",
                len(reaped),
                named,
                job_list(reaped),
            )
            emit_rescued(self._emit, reaped, RescueReason.LEASE_EXPIRED.value)
            self._on_reaped()
        return reaped
