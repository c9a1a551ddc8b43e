"""Run one claimed job: invoke its handler, keep the lease alive, record success or failure."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobchain.contracts import JobGet, JobRenewLease, JobReschedule
from jobchain.entities import Job, JobStatus, Schedule
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
    RescheduleJobError,
)
from jobchain.worker.abort import AbortReason, AttemptAbortedError
from jobchain.worker.attempt import Attempt, Continue, HandlerDidNotCompleteError
from jobchain.worker.backoff import DEFAULT_RECOVERY_BACKOFF, Backoff, LeaseConfig
from jobchain.worker.processors import run_wrapped

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.contracts import Unsubscribe
    from jobchain.worker.completer import CompletionGroups
    from jobchain.worker.processors import Processor

log = logging.getLogger("jobchain.worker")

MAX_ERROR_LENGTH = 10_000

OWNERSHIP_LOSSES = (
    JobNotFoundError,
    JobAlreadyCompletedError,
    JobTakenByAnotherWorkerError,
    AttemptAbortedError,
)
"""The errors that mean the attempt no longer owns its job (or must stop): nothing to retry."""


def describe_error(error: BaseException) -> str:
    """A readable, bounded record of an error for ``last_attempt_error``."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__)).strip()
    if not text:
        text = f"{type(error).__name__}: {error!r}"
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 15] + "\n…(truncated)"


def reason_for(job: Job | None, worker_id: str, lease_generation: int) -> AbortReason | None:
    """Why this worker no longer owns ``job`` (None if it still does)."""
    if job is None:
        return AbortReason.NOT_FOUND
    if job.status is JobStatus.COMPLETED:
        return AbortReason.ALREADY_COMPLETED
    if (
        job.status is not JobStatus.RUNNING
        or job.leased_by != worker_id
        or job.lease_generation != lease_generation
    ):
        return AbortReason.TAKEN_BY_ANOTHER_WORKER
    return None


def reason_for_error(error: BaseException) -> AbortReason:
    if isinstance(error, JobNotFoundError):
        return AbortReason.NOT_FOUND
    if isinstance(error, JobAlreadyCompletedError):
        return AbortReason.ALREADY_COMPLETED
    if isinstance(error, JobTakenByAnotherWorkerError):
        return AbortReason.TAKEN_BY_ANOTHER_WORKER
    if isinstance(error, AttemptAbortedError):
        return error.reason
    return AbortReason.ERROR


RESCHEDULE_TRIES = 8
"""How often a failed attempt's reschedule is tried before the job is left to the reaper."""


@dataclass(frozen=True, slots=True)
class AttemptSettings:
    retry: Backoff
    lease: LeaseConfig
    recovery: Backoff = DEFAULT_RECOVERY_BACKOFF


class AttemptRunner:
    """Everything one attempt needs beyond the attempt object itself."""

    def __init__(
        self,
        client: Client,
        processor: Processor,
        job: Job,
        worker_id: str,
        settings: AttemptSettings,
        on_event: Callable[[str, Job, dict[str, Any]], None],
        completion_groups: CompletionGroups | None = None,
        *,
        on_handler_returned: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.processor = processor
        self.job = job
        self.worker_id = worker_id
        self.settings = settings
        self.on_event = on_event
        self.completion_groups = completion_groups
        self.on_handler_returned = on_handler_returned
        self.attempt: Attempt[Any, Any] | None = None
        self._renewal: asyncio.Task[None] | None = None
        self._unsubscribe: Unsubscribe | None = None

    async def run(self) -> None:
        """Run the attempt to its end; never raises except on cancellation."""
        self.on_event("job_attempt_started", self.job, {})
        try:
            attempt: Attempt[Any, Any] = Attempt(self.client, self.processor, self.job, self.worker_id)
        except Exception as error:  # stored input no longer matches the type: retry later
            await self._reschedule(error)
            return
        self.attempt = attempt
        attempt.on_staged = self._start_staged
        attempt.completion_groups = self.completion_groups
        try:
            await self._invoke(attempt)
            if attempt.completed is None:
                raise HandlerDidNotCompleteError()
            if self.on_handler_returned is not None:
                self.on_handler_returned()
            await attempt.close_success()
        except asyncio.CancelledError:
            await attempt.close_failure(asyncio.CancelledError())
            raise
        except OWNERSHIP_LOSSES as error:
            await attempt.close_failure(error)
            reason = reason_for_error(error)
            attempt.signal.abort(reason)
            if reason is AbortReason.SHUTDOWN:
                # The job is still ours: hand it back now rather than when the lease expires.
                await self._reschedule(error)
            else:
                self.on_event("job_attempt_" + reason.value, self.job, {})
        except BaseException as error:
            await attempt.close_failure(error)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            await self._reschedule(error)
        else:
            self.on_event(
                "job_attempt_completed", self.job, {"continued": attempt.completed.continuation is not None}
            )
        finally:
            await self._stop_staged()

    async def renew_then_run(self) -> None:
        """For a job that waited in the worker's buffer: extend its lease first, then run it.

        A job taken meanwhile (lease lost, deleted, completed) is dropped without running.
        """
        try:
            async with self.client.state.transaction() as tx:
                await tx.job_renew_lease(
                    JobRenewLease(
                        job_id=self.job.id,
                        worker_id=self.worker_id,
                        lease_for=self.settings.lease.duration,
                        lease_generation=self.job.lease_generation,
                    )
                )
        except OWNERSHIP_LOSSES as lost:
            self.on_event("job_attempt_" + reason_for_error(lost).value, self.job, {})
            return
        except Exception:  # transient: the lease may still hold, and the attempt's writes are fenced
            log.warning("could not renew buffered job %s before starting it", self.job.id, exc_info=True)
        await self.run()

    async def _invoke(self, attempt: Attempt[Any, Any]) -> None:
        processor = self.processor
        if not processor.is_async:
            await attempt.auto_setup()

            async def run_sync() -> Any:
                result = await asyncio.to_thread(processor.handler, attempt)
                if isinstance(result, Continue):
                    return await attempt.continue_with(
                        result.job_type, result.input, schedule=result.schedule, blockers=result.blockers
                    )
                return await attempt.complete(result)

            await run_wrapped(processor.middleware, "wrap_handler", attempt, run_sync)
            return

        async def run_async() -> Any:
            return await processor.handler(attempt)

        task = asyncio.ensure_future(run_wrapped(processor.middleware, "wrap_handler", attempt, run_async))
        # Let the handler run up to its first suspension: if it chose no mode by then
        # (it awaited something other than prepare/complete), set up staged mode.
        await asyncio.sleep(0)
        if not task.done() and attempt.mode is None:
            try:
                await attempt.auto_setup()
            except BaseException:
                task.cancel()
                raise
        await task

    async def _start_staged(self) -> None:
        """Staged mode: keep the lease alive and listen for ownership loss."""
        notify = self.client.notify
        if notify is not None:
            try:
                self._unsubscribe = await notify.listen_job_ownership_lost(
                    self.job.id, self._on_ownership_lost
                )
            except Exception:  # notifications are hints; renewal still detects the loss
                log.warning("could not listen for ownership loss of job %s", self.job.id, exc_info=True)
        self._renewal = asyncio.create_task(self._renew_forever())

    async def _stop_staged(self) -> None:
        renewal, self._renewal = self._renewal, None
        if renewal is not None:
            renewal.cancel()
            await asyncio.gather(renewal, return_exceptions=True)
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            try:
                await unsubscribe()
            except Exception:
                log.debug("unsubscribe failed", exc_info=True)

    def _on_ownership_lost(self, _job_id: str) -> None:
        if self._renewal is not None and not self._renewal.done():
            asyncio.get_running_loop().create_task(self._check_ownership())

    async def _check_ownership(self) -> None:
        attempt = self.attempt
        if attempt is None or attempt.signal.aborted or attempt.completed is not None:
            return
        async with self.client.state.transaction(read_only=True) as tx:
            current = await tx.job_get(JobGet(job_id=self.job.id))
        reason = reason_for(current, self.worker_id, self.job.lease_generation)
        if reason is not None and attempt.completed is None:
            attempt.signal.abort(reason)

    async def _renew_forever(self) -> None:
        lease = self.settings.lease
        attempt = self.attempt
        assert attempt is not None
        loop = asyncio.get_running_loop()
        expires = loop.time() + lease.duration.total_seconds()
        while not attempt.signal.aborted:
            await asyncio.sleep(lease.renew_every.total_seconds())
            try:
                async with self.client.state.transaction() as tx:
                    await tx.job_renew_lease(
                        JobRenewLease(
                            job_id=self.job.id,
                            worker_id=self.worker_id,
                            lease_for=lease.duration,
                            lease_generation=self.job.lease_generation,
                        )
                    )
                expires = loop.time() + lease.duration.total_seconds()
                self.on_event("job_attempt_lease_renewed", self.job, {})
            except OWNERSHIP_LOSSES as error:
                attempt.signal.abort(reason_for_error(error))
                return
            except Exception:
                # A transient failure: keep trying until the lease would have run out.
                log.warning("lease renewal of job %s failed", self.job.id, exc_info=True)
                if loop.time() >= expires:
                    attempt.signal.abort(AbortReason.ERROR)
                    return

    async def _reschedule(self, error: BaseException) -> None:
        await reschedule_attempt(self.client, self.job, self.worker_id, self.settings, self.on_event, error)


async def reschedule_attempt(
    client: Client,
    job: Job,
    worker_id: str,
    settings: AttemptSettings,
    on_event: Callable[[str, Job, dict[str, Any]], None],
    error: BaseException,
) -> None:
    """Hand a failed (or released) attempt's job back with its error and the retry backoff."""
    if isinstance(error, RescheduleJobError):
        schedule = error.schedule if isinstance(error.schedule, Schedule) else Schedule(after=timedelta(0))
        message = error.cause or "rescheduled by the handler (no reason given)"
    elif isinstance(error, AttemptAbortedError) and error.reason is AbortReason.SHUTDOWN:
        schedule = Schedule(after=timedelta(0))
        message = "released: the worker shut down before the attempt finished"
    else:
        schedule = Schedule(after=settings.retry.delay(job.attempt))
        message = describe_error(error)
    request = JobReschedule(
        job_id=job.id,
        schedule=schedule,
        error=message,
        worker_id=worker_id,
        lease_generation=job.lease_generation,
    )
    loop = asyncio.get_running_loop()
    lease_ends = loop.time() + settings.lease.duration.total_seconds()
    for tries in range(1, RESCHEDULE_TRIES + 1):
        try:
            async with client.transaction() as tx:
                rescheduled = await tx.state.job_reschedule(request)
                tx.hooks.job_scheduled(rescheduled.type_name)
            break
        except OWNERSHIP_LOSSES as lost:
            on_event("job_attempt_" + reason_for_error(lost).value, job, {})
            return
        except Exception:
            # The store failed too. Leaving the job running would park it until its lease
            # runs out, so try again while the lease holds; past that the reaper has it.
            delay = settings.recovery.delay(tries).total_seconds()
            if tries == RESCHEDULE_TRIES or loop.time() + delay >= lease_ends:
                log.warning(
                    "could not reschedule job %s; it returns when its lease expires", job.id, exc_info=True
                )
                return
            await asyncio.sleep(delay)
    on_event(
        "job_attempt_failed",
        job,
        {"error": f"{type(error).__name__}: {error}", "rescheduled_at": rescheduled.scheduled_at.isoformat()},
    )
