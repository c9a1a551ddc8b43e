"""The worker's claim: what it asks the state backend for, and when to ask again.

Every claim carries the fleet-wide limits of the served types (``JobType.limits``:
``max_running``, ``rate_limit``) and the priority aging bound; the backend enforces them
inside the claim (``JobsAcquire``). A claim a limit capped reports the types it held back:
the worker then claims again when the rate window ends (``retry_at``) or after
:data:`LIMITS_POLL` seconds at the latest, whichever comes first — never at once, since
``job_next_available`` still sees a capped type's due jobs as available now. A worker that
finishes a job of a ``max_running`` type publishes a *job scheduled* wake-up for it after
commit (:mod:`jobchain.worker.slots`), so capped workers elsewhere claim the freed place
without waiting for their poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

from jobchain.contracts import JobNextAvailable, JobsAcquire, StateTx
from jobchain.entities import Job, TypeLimits

LIMITS_POLL = 1.0
"""Seconds after which a worker whose claim a limit capped claims again at the latest."""

MIN_LIMITS_WAIT = 0.02
"""Shortest wait before claiming a capped type again (clocks of worker and database differ)."""

OpenOperation = Callable[..., AbstractAsyncContextManager[StateTx]]


def type_limits_of(job_types: Sequence[object]) -> dict[str, TypeLimits]:
    """The limits of the served types that have any, by type name (a claim's ``type_limits``)."""
    limits: dict[str, TypeLimits] = {}
    for job_type in job_types:
        found = getattr(job_type, "limits", None)
        if found is not None:
            limits[getattr(job_type, "name")] = found  # noqa: B009 -- typed as object here
    return limits


class Claims:
    """Builds each claim and remembers what the last one held back."""

    def __init__(
        self,
        *,
        type_names: list[str],
        worker_id: str,
        lease_for: timedelta,
        type_leases: dict[str, timedelta],
        type_limits: dict[str, TypeLimits],
        priority_aging: timedelta,
        open_operation: OpenOperation,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._type_names = type_names
        self._worker_id = worker_id
        self._lease_for = lease_for
        self._type_leases = type_leases
        self.type_limits = type_limits
        self.priority_aging = priority_aging
        self._open = open_operation
        self._now = now
        self.held_back: tuple[str, ...] = ()
        """Types the last claim's limits capped (empty when none did)."""
        self.retry_at: datetime | None = None
        self.monotonic: Callable[[], float] | None = None
        """The clock of :attr:`sent_at` (None: the event loop's)."""
        self.sent_at = 0.0
        """Monotonic time the last claim was sent: its jobs' local deadlines count from it."""
        self.capped_types = frozenset(
            name for name, lim in type_limits.items() if lim.max_running is not None
        )
        """Types with a ``max_running``: finishing one of their jobs frees a place fleet-wide."""

    async def claim(self, limit: int, stopping: Callable[[], bool]) -> tuple[list[Job], bool]:
        """Claim up to ``limit`` jobs; (jobs, whether more were waiting)."""
        async with self._open(read_only=False) as tx:
            if stopping():
                # stop() came while the transaction was opening: a claim now would only hand
                # its jobs straight back, with an attempt recorded that never ran.
                return [], False
            self.sent_at = (
                self.monotonic() if self.monotonic is not None else asyncio.get_running_loop().time()
            )
            acquired = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=self._type_names,
                    worker_id=self._worker_id,
                    lease_for=self._lease_for,
                    type_leases=self._type_leases,
                    type_limits=self.type_limits,
                    priority_aging=self.priority_aging,
                    limit=limit,
                )
            )
        self.held_back = acquired.held_back
        self.retry_at = acquired.retry_at
        return acquired.jobs, acquired.has_more

    async def seconds_to_next(self, longest: float) -> float:
        """How long to wait before the next claim, at most ``longest`` seconds.

        The earliest due job of a type the last claim did not hold back, and for the held
        back types the end of their rate window or :data:`LIMITS_POLL`.
        """
        held = set(self.held_back)
        if held:
            wait = LIMITS_POLL
            if self.retry_at is not None:
                wait = min(wait, (self.retry_at - self._now()).total_seconds())
            longest = min(longest, max(wait, MIN_LIMITS_WAIT))
        names = [name for name in self._type_names if name not in held]
        if not names:
            return longest
        async with self._open(read_only=True) as tx:
            next_in = await tx.job_next_available(JobNextAvailable(type_names=names))
        if next_in is not None:
            longest = min(longest, next_in.total_seconds())
        return longest
