"""Group commit of plain completions: many finished attempts, one transaction.

An attempt whose handler called ``complete(output)`` with no callback, continuation or
middleware, outside any open transaction, writes nothing but the completion itself. Such
completions are queued here (atomic ones when the handler returns, staged ones from
``complete``, which waits for the result) and written together: one transaction (one
commit, one fsync) for every completion that arrived while the groups before were being
written, as River's and Graphile Worker's batch completers do. Two groups may be in flight
at once, so the next group does not wait for the previous one's fsync.

A refused completion (lease lost, job deleted or completed elsewhere) changes nothing in
the group's transaction, so it fails only its own attempt. A transient failure (connection
lost, no connection available, server restarting, conflict) fails the whole group: the group
is written again, as one, with a short capped backoff, until it commits or the shortest
lease in it has run out; it never falls back to one completion at a time, which in an
outage would wait out the pool timeout once per completion while every lease expired.
Any other error fails the group's transaction because of what one completion holds: each
completion of that group is then written again in its own transaction, so one bad
completion never undoes another.

A try that failed transiently may still have committed (the connection was lost before the
reply): the next try then finds those jobs already completed. A job found completed by the
very attempt that queued it (same worker, same lease generation) is that attempt's own
completion and is settled as written, not as a refusal: its attempt did not lose its job.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobchain.completion import JobFinished, PlainCompletion, complete_jobs
from jobchain.contracts import JobCompleted
from jobchain.entities import Job
from jobchain.errors import BackendUnreachableError, JobAlreadyCompletedError, TransientStateError
from jobchain.worker.backoff import Backoff
from jobchain.worker.ownership import own_completion

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")

DEFAULT_GROUP_SIZE = 100
"""Most completions written in one transaction."""

OUTAGE_RETRY = Backoff(initial=timedelta(seconds=0.25), multiplier=2.0, maximum=timedelta(seconds=2))
"""Waits between tries of a group that failed transiently: short, so completions commit soon
after the database is back."""

OUTAGE_ERRORS = (TransientStateError, BackendUnreachableError)
"""Failures of the database or the connection, not of any one completion."""

DEFAULT_WRITERS = 2
"""Groups written at the same time: a group that waits for its commit's fsync does not hold
back the next one, and the database flushes commits that arrive together with one fsync."""


def _new_future() -> asyncio.Future[JobFinished]:
    future: asyncio.Future[JobFinished] = asyncio.get_running_loop().create_future()
    # An attempt cancelled while its group was written never reads the outcome; mark a
    # refusal as seen so asyncio does not log it as never retrieved.
    future.add_done_callback(_seen)
    return future


def _seen(future: asyncio.Future[JobFinished]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass(slots=True)
class _Request:
    item: PlainCompletion
    done: asyncio.Future[JobFinished] = field(default_factory=_new_future)


class CompletionGroups:
    """Writes queued completions in groups of up to ``group_size``, up to ``writers`` groups at a time."""

    def __init__(
        self,
        client: Client,
        group_size: int = DEFAULT_GROUP_SIZE,
        writers: int = DEFAULT_WRITERS,
        *,
        outage_retry: Backoff = OUTAGE_RETRY,
    ) -> None:
        self._client = client
        self._outage_retry = outage_retry
        self._group_size = group_size
        self._max_writers = writers
        self._queue: list[_Request] = []
        self._writers: set[asyncio.Task[None]] = set()
        self._gathering = 0  # writers that have not taken their group yet

    async def complete(self, job: Job, output: Any, *, worker_id: str, now: datetime) -> JobFinished:
        """Queue the completion of ``job`` with its already encoded ``output``; return once committed."""
        request = _Request(PlainCompletion(job=job, output=output, worker_id=worker_id, now=now))
        self._queue.append(request)
        self._ensure_writer()
        # Shielded: a cancelled attempt still learns nothing wrong, the group decides its job.
        return await asyncio.shield(request.done)

    async def complete_many(
        self, items: list[tuple[Job, Any]], *, worker_id: str, now: datetime
    ) -> list[JobFinished | BaseException]:
        """Write a batch handler's completions as groups of their own; each result or refusal in
        its place. (They already finish together: no queue, no future per completion.)"""
        completions = [
            PlainCompletion(job=job, output=output, worker_id=worker_id, now=now) for job, output in items
        ]
        results: list[JobFinished | BaseException] = []
        for start in range(0, len(completions), self._group_size):
            # Shielded: a cancelled batch still lets its group decide its jobs.
            results += await asyncio.shield(self._write(completions[start : start + self._group_size]))
        return results

    def _ensure_writer(self) -> None:
        # A new writer only when every writer is busy writing: while one is still gathering,
        # the completions just queued join its group.
        if self._gathering == 0 and len(self._writers) < self._max_writers:
            writer = asyncio.get_running_loop().create_task(self._write_all())
            self._writers.add(writer)

    async def _write_all(self) -> None:
        try:
            await self._write_queued()
        finally:
            # Leave the set as the last step, not in a done-callback: that runs an iteration
            # later, and a completion queued in between would find every writer "busy" with
            # none left to write it (stranded until its lease ran out).
            task = asyncio.current_task()
            if task is not None:
                self._writers.discard(task)

    async def _write_queued(self) -> None:
        while self._queue:
            self._gathering += 1
            try:
                # Let the attempts finishing in this loop iteration join the group.
                await asyncio.sleep(0)
            finally:
                self._gathering -= 1
            group, self._queue = self._queue[: self._group_size], self._queue[self._group_size :]
            if not group:
                return
            results = await self._write([request.item for request in group])
            for request, result in zip(group, results, strict=True):
                _settle(request, result)

    async def _write(self, items: list[PlainCompletion]) -> list[JobFinished | BaseException]:
        """Write ``items`` in one transaction: again as one while the failure is transient and
        their leases last, else each of them in a transaction of its own."""
        loop = asyncio.get_running_loop()
        give_up_at: float | None = None
        tries = 0
        while True:
            try:
                written = await self._write_together(items)
            except OUTAGE_ERRORS as error:
                tries += 1
                now = loop.time()
                if give_up_at is None:
                    give_up_at = now + _shortest_lease(items)
                    log.warning(
                        "group of %d completions failed (%s); writing it again once the database answers",
                        len(items),
                        error,
                    )
                delay = self._outage_retry.delay(tries).total_seconds()
                if now + delay >= give_up_at:
                    # Past its lease the job belongs to the reaper: the attempts learn the
                    # failure and hand their jobs back if they still can.
                    log.warning(
                        "group of %d completions still failing after %d tries (%s); "
                        "leaving them to their attempts",
                        len(items),
                        tries,
                        error,
                    )
                    return [error] * len(items)
                await asyncio.sleep(delay)
            except Exception as error:
                log.info("group of %d completions failed (%s); writing them one by one", len(items), error)
                break
            else:
                return written if tries == 0 else await self._own_landed(items, written)
        results: list[JobFinished | BaseException] = []
        for item in items:
            try:
                results += await self._write_together([item])
            except Exception as error:
                results.append(error)
        return results if tries == 0 else await self._own_landed(items, results)

    async def _own_landed(
        self, items: list[PlainCompletion], results: list[JobFinished | BaseException]
    ) -> list[JobFinished | BaseException]:
        """After a try that failed transiently: a job now "already completed" by the attempt
        that queued it was completed by that earlier try, which committed after all."""
        settled: list[JobFinished | BaseException] = []
        for item, result in zip(items, results, strict=True):
            if isinstance(result, JobAlreadyCompletedError):
                own = await own_completion(self._client, item.job, item.worker_id)
                if own is not None:
                    result = JobFinished(
                        completed=JobCompleted(job=own.job, chain_completed=not own.continued)
                    )
            settled.append(result)
        return settled

    async def _write_together(self, items: list[PlainCompletion]) -> list[JobFinished | BaseException]:
        # One statement where the adapter batches completions (one pipeline on PostgreSQL): it
        # needs no BEGIN/COMMIT round trips around it.
        async with self._client.transaction(autocommit=True) as tx:
            return list(await complete_jobs(tx, items))


def _shortest_lease(items: list[PlainCompletion]) -> float:
    """Seconds of the shortest lease claimed for ``items``' jobs (how long a retry may last)."""
    leases = [
        (item.job.leased_until - item.job.attempt_started_at).total_seconds()
        for item in items
        if item.job.leased_until is not None and item.job.attempt_started_at is not None
    ]
    return min(leases, default=0.0)


def _settle(request: _Request, result: JobFinished | BaseException) -> None:
    if request.done.done():
        return
    if isinstance(result, BaseException):
        request.done.set_exception(result)
    else:
        request.done.set_result(result)
