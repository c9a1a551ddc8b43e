"""``run_until_idle``: run every due job of a client, one at a time, through the real worker code.

A test worker (:class:`_TestWorker`, a :class:`~jobchain.worker.Worker` that is never started:
no loop, heartbeat, reaper or wake-ups) claims one job at a time with the real claim
(``jobs_acquire``, the worker's leases, limits and priority aging) and runs it with the real
attempt runner (:class:`~jobchain.worker.runner.AttemptRunner`, or the batch runner for a batch
processor): the same modes, middleware, completions, continuations, retries with backoff,
attempt limits, deadlines and events as a running worker. Periodic schedules go through the
worker's scheduler (``run_due(now)``).

Time stands still during a run: everything it writes is stamped with one clock (the ``now``
argument, else the client's ``clock``, else the real time), on every backend, by reading the
state through :func:`~jobchain.testing._clocked.clocked_state`.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from jobchain.client import Client
from jobchain.contracts import JobGet, JobNextAvailable, JobsAcquire
from jobchain.entities import Job
from jobchain.errors import InvalidArgumentError, JobchainError
from jobchain.job_types import UNSET, MaxAttempts
from jobchain.testing._clocked import clocked_state
from jobchain.worker.backoff import Backoff
from jobchain.worker.batch import BatchRunner
from jobchain.worker.completer import CompletionGroups
from jobchain.worker.loop import Worker
from jobchain.worker.processors import Processors
from jobchain.worker.runner import AttemptRunner


class RunOutcome(StrEnum):
    """How one attempt run by :func:`run_until_idle` ended."""

    COMPLETED = "completed"
    """The job completed; its chain is complete unless a continuation follows."""
    CONTINUED = "continued"
    """The job completed with a continuation (the next job of its chain)."""
    WAITING = "waiting"
    """The attempt ended in ``wait_for``: the job runs again once the chains it waits for end."""
    RETRIED = "retried"
    """The handler failed; the job is pending again at ``scheduled_at`` (backoff)."""
    FAILED = "failed"
    """The handler failed for good (attempt limit, ``fail_on``, ``fail_job``)."""
    ABORTED = "aborted"
    """The job was taken away while it ran (cancelled, deleted, lease lost)."""


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt :func:`run_until_idle` ran, in the order it ran."""

    job_id: str
    type_name: str
    chain_id: str
    attempt: int
    """The attempt's number (1 for a job's first run)."""
    outcome: RunOutcome
    error: str | None
    """The failure recorded for a retried or failed attempt (None otherwise)."""
    job: Job | None
    """The job as the attempt left it (None if it was deleted meanwhile): status, output,
    ``scheduled_at`` of a retry, ``last_attempt_error``."""


class RunLimitError(JobchainError):
    """run_until_idle ran ``max_jobs`` jobs and more were still due: a chain that continues or
    retries itself forever? Raise ``max_jobs`` if that many jobs are expected."""

    def __init__(self, max_jobs: int, ran: list[JobRun]) -> None:
        self.ran = ran
        super().__init__(
            f"run_until_idle ran max_jobs={max_jobs} jobs and more are still due (last: "
            f"{ran[-1].type_name} {ran[-1].job_id}); a chain that continues or retries itself "
            "without end? Raise max_jobs if that many jobs are expected"
        )


async def run_until_idle(
    client: Client,
    processors: Processors | Sequence[Processors],
    *,
    now: datetime | None = None,
    max_jobs: int = 10_000,
    retry: Backoff | None = None,
    max_attempts: MaxAttempts = UNSET,
    timeout: timedelta | float | None = None,  # noqa: ASYNC109 -- the handlers' deadline, as Worker(timeout=)
) -> list[JobRun]:
    """Run every job that is due, one at a time in claim order, until none is; return what ran.

    Continuations and dependents unblocked by a completion run in the same call when they
    are due; a failed attempt is retried after its backoff, so it runs again only in a later
    call once the clock has passed its ``scheduled_at``. Due periodic ticks of the
    processors' schedules start first (the first call on a client is when its test worker
    "started": later calls start the ticks after it; a ``catch_up`` schedule registered before
    it, by an earlier client, the latest missed since).

    ``now``: the time the run stands at (default: the client's clock, else the real time);
    everything the run writes is stamped with it. ``retry``, ``max_attempts``, ``timeout``:
    as for :class:`~jobchain.worker.Worker`. Raises :class:`RunLimitError` after ``max_jobs``
    attempts while more are due.
    """
    if not isinstance(client, Client):
        raise InvalidArgumentError(f"run_until_idle needs a jobchain Client, got {client!r}")
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
        raise InvalidArgumentError(f"max_jobs must be a positive integer, got {max_jobs!r}")
    if now is not None and (not isinstance(now, datetime) or now.utcoffset() is None):
        raise InvalidArgumentError(f"now must be an aware datetime, got {now!r}")
    slices = (processors,) if isinstance(processors, Processors) else tuple(processors)
    worker = _worker_for(client, slices, (retry, max_attempts, timeout))
    clock = client.clock
    if now is not None:
        fixed = now
        worker.clock = lambda: fixed
    else:
        worker.clock = clock if clock is not None else _real_now
    return await worker.run_until_idle(max_jobs)


def _real_now() -> datetime:
    return datetime.now(UTC)


# One test worker per client and processor slices: its scheduler remembers the ticks it did,
# as a running worker's does.
_workers: weakref.WeakKeyDictionary[Client, list[_TestWorker]] = weakref.WeakKeyDictionary()


def _worker_for(client: Client, slices: tuple[Processors, ...], options: tuple[Any, ...]) -> _TestWorker:
    known = _workers.setdefault(client, [])
    for worker in known:
        same = len(worker.slices) == len(slices) and all(map(operator.is_, worker.slices, slices))
        if same and worker.options == options:
            return worker
    worker = _TestWorker(client, slices, options)
    known.append(worker)
    return worker


class _TestWorker(Worker):
    """A worker that is never started: run_until_idle drives its claim and attempts itself."""

    def __init__(self, client: Client, slices: tuple[Processors, ...], options: tuple[Any, ...]) -> None:
        self.slices = slices
        self.options = options
        self.clock: Callable[[], datetime] = _real_now
        retry, max_attempts, timeout = options
        # The state seen through the run's clock, in a client sharing the real one's adapters.
        twin = Client(
            clocked_state(client.state, self._now),
            client.notify,
            client.job_types,
            observers=client.observers,
            clock=self._now,
        )
        super().__init__(
            twin,
            list(slices),
            name="jobchain-testing",
            group_commit=False,
            retry=retry,
            max_attempts=max_attempts,
            timeout=timeout,
        )

    def _now(self) -> datetime:
        return self.clock()

    async def run_until_idle(self, max_jobs: int) -> list[JobRun]:
        ran: list[JobRun] = []
        if self._end_hooks is not None:  # as a worker's loop does before its first claim
            await self._register_end_hooks(self._end_hooks)
        while True:
            now = self._now()
            if self.scheduler is not None:
                await self.scheduler.run_due(now)
            if len(ran) >= max_jobs:
                if await self._due(now):
                    raise RunLimitError(max_jobs, ran)
                return ran
            claimed = await self._claim_due(now, self._type_names, 1)
            if not claimed:
                return ran
            ran.extend(await self._run_claimed(claimed[0], now))

    async def _due(self, now: datetime) -> bool:
        async with self.client.state.transaction(read_only=True) as tx:
            wait = await tx.job_next_available(JobNextAvailable(type_names=self._type_names, now=now))
        return wait is not None and wait <= timedelta(0)

    async def _claim_due(self, now: datetime, type_names: list[str], limit: int) -> list[Job]:
        async with self.client.state.transaction() as tx:
            acquired = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=type_names,
                    worker_id=self.worker_id,
                    lease_for=self._settings.claim_lease,
                    type_leases=self._settings.type_leases(),
                    type_limits=self._claims.type_limits,
                    priority_aging=self.priority_aging,
                    limit=limit,
                    now=now,
                )
            )
        return list(acquired.jobs)

    async def _run_claimed(self, job: Job, now: datetime) -> list[JobRun]:
        processor = self._processors[job.type_name]
        settings = self._settings.of(job.type_name)
        events: dict[str, tuple[str, dict[str, Any]]] = {}

        def on_event(name: str, event_job: Job, attributes: dict[str, Any]) -> None:
            if name != "job_attempt_started":
                events[event_job.id] = (name, attributes)
            self._on_attempt_event(name, event_job, attributes)

        jobs = [job]
        if processor.max_batch is not None:
            # A batch processor takes the due jobs of its type together, as a worker's slot does.
            if processor.max_batch > 1:
                jobs += await self._claim_due(now, [job.type_name], processor.max_batch - 1)
            groups = CompletionGroups(self.client)
            await BatchRunner(self.client, processor, jobs, self.worker_id, settings, on_event, groups).run()
        else:
            await AttemptRunner(self.client, processor, job, self.worker_id, settings, on_event).run()
        return [await self._record(j, events.get(j.id)) for j in jobs]

    async def _record(self, job: Job, event: tuple[str, dict[str, Any]] | None) -> JobRun:
        async with self.client.state.transaction(read_only=True) as tx:
            after = await tx.job_get(JobGet(job_id=job.id))
        name, attributes = event if event is not None else ("", {})
        error: str | None = None
        if name == "job_attempt_completed":
            outcome = RunOutcome.CONTINUED if attributes.get("continued") else RunOutcome.COMPLETED
        elif name == "job_attempt_waiting":
            outcome = RunOutcome.WAITING
        elif name == "job_attempt_failed":
            outcome = RunOutcome.FAILED if attributes.get("final") else RunOutcome.RETRIED
            error = str(attributes.get("error") or (after.last_attempt_error if after else "") or "")
        else:
            # No outcome written by this attempt: the job was taken away (or the write failed).
            outcome = RunOutcome.ABORTED
        return JobRun(
            job_id=job.id,
            type_name=job.type_name,
            chain_id=job.chain_id,
            attempt=job.attempt,
            outcome=outcome,
            error=error,
            job=after,
        )
