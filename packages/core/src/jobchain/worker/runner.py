"""Run one claimed job: invoke its handler, keep the lease alive, record success or failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobchain.contracts import JobGet, JobRenewLease
from jobchain.contracts.observe import ObservesAttempts
from jobchain.entities import Job
from jobchain.errors import JobTimeoutError
from jobchain.job_types import DEFAULT_MAX_ATTEMPTS
from jobchain.worker.abort import AbortReason
from jobchain.worker.attempt import Attempt, Continue, HandlerDidNotCompleteError
from jobchain.worker.backoff import DEFAULT_RECOVERY_BACKOFF, Backoff, LeaseConfig
from jobchain.worker.deadline import Deadline
from jobchain.worker.emitter import AttemptScopes
from jobchain.worker.failures import (
    MAX_ERROR_LENGTH,
    RESCHEDULE_TRIES,
    describe_error,
    fail_over_limit,
    over_limit,
    record_failure,
)
from jobchain.worker.local_deadline import local_deadline
from jobchain.worker.ownership import OWNERSHIP_LOSSES, reason_for, reason_for_error
from jobchain.worker.processors import SyncHandlerWrapper, call_in_thread, run_wrapped

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.contracts import Unsubscribe
    from jobchain.worker.completer import CompletionGroups
    from jobchain.worker.processors import Processor

log = logging.getLogger("jobchain.worker")

__all__ = [
    "MAX_ERROR_LENGTH",
    "OWNERSHIP_LOSSES",
    "RESCHEDULE_TRIES",
    "AttemptRunner",
    "AttemptSettings",
    "describe_error",
    "reason_for",
    "reason_for_error",
    "reschedule_attempt",
]

WATCH_AFTER_SECONDS = 0.25
"""An attempt not in staged mode that has run this long starts listening for ownership loss
(cancellation): quick attempts never pay for a subscription."""


@dataclass(frozen=True, slots=True)
class AttemptSettings:
    """One served type's resolved attempt settings (see :mod:`jobchain.worker.settings`)."""

    retry: Backoff
    lease: LeaseConfig
    recovery: Backoff = DEFAULT_RECOVERY_BACKOFF
    max_attempts: int | None = DEFAULT_MAX_ATTEMPTS
    """Attempts a job may use (since its last retry) before it fails; None: unlimited."""
    timeout: timedelta | None = None
    """The handler's deadline; None: none."""
    fail_on: tuple[type[BaseException], ...] = ()
    """Exception types that fail the job at once."""
    sync_wrapper: SyncHandlerWrapper | None = None
    """Wraps each sync handler call in its thread (``Worker(sync_handler_wrapper=...)``)."""


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
        clock: Callable[[], float] | None = None,
        lease_deadline: float | None = None,
        on_lease_expired: Callable[[], None] | None = None,
        lapsed: Callable[[], bool] | None = None,
        on_settled: Callable[[], None] | None = None,
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
        self._watch: asyncio.Task[None] | None = None
        self.started_at: float | None = None
        """Loop time the handler started (None before): the worker's watch reads it."""
        self.watched = False
        """Whether the attempt listens for ownership loss (staged mode, or a long attempt)."""
        self._clock = clock
        self.lease_deadline = lease_deadline
        """Monotonic time past which this worker may no longer hold the job: the claim's (or
        the last confirmed renewal's) send time plus the lease less the safety margin."""
        self._on_lease_expired = on_lease_expired
        self._lapsed = lapsed
        """Whether the worker's liveness deadline passed: others may have taken every job."""
        self._lease_watch: asyncio.Task[None] | None = None
        self._on_settled = on_settled
        """Told once the attempt's outcome is written (committed, rescheduled or failed, or the
        job found lost), before the attempt cleans up: the worker no longer holds the job."""

    def run(self) -> Coroutine[Any, Any, None]:
        """Run the attempt to its end (await the result); never raises except on cancellation.

        Inside the scopes of the client's ``ObservesAttempts`` observers, if it has any. A plain
        function returning the coroutine: without such observers, no extra frame per attempt.
        """
        observing = self.client.attempt_observers
        if not observing:
            return self._run(None)
        return self._run_scoped(observing)

    async def _run_scoped(self, observing: tuple[ObservesAttempts, ...]) -> None:
        scope = AttemptScopes(observing, (self.job,), self.worker_id)
        try:
            await self._run(scope)
        finally:
            scope.exit()

    async def _run(self, scope: AttemptScopes | None) -> None:
        if over_limit(self.job, self.settings):
            await fail_over_limit(self.client, self.job, self.worker_id, self.settings, self.on_event)
            return
        self.on_event("job_attempt_started", self.job, {})
        try:
            attempt: Attempt[Any, Any] = Attempt(self.client, self.processor, self.job, self.worker_id)
        except Exception as error:  # stored input no longer matches the type: retry later
            if scope is not None:
                scope.error(error)
            await self._reschedule(error)
            return
        self.attempt = attempt
        if self._lapsed is not None:
            # A handler resumed after a stall reads its signal as fired before its next side
            # effect, even before the worker's liveness watch has run.
            attempt.signal.expire_when(self._lapsed)
        attempt.on_staged = self._start_staged
        attempt.completion_groups = self.completion_groups
        deadline: Deadline | None = None
        timeout = self.settings.timeout
        if timeout is not None:
            # Measures the handler alone: started and stopped around its call in _invoke,
            # stopped while it waits for jobchain's own writes (see jobchain.worker.deadline).
            deadline = Deadline(self.job.id, timeout, attempt.signal, clock=self._clock)
            attempt.deadline = deadline
        self.started_at = asyncio.get_running_loop().time()
        written = False  # the attempt's outcome (or the loss of its job) is settled
        try:
            if deadline is None:
                await self._invoke(attempt)
            else:
                await deadline.run(self._invoke(attempt), attempt.unfinished)
            if attempt.completed is None:
                raise HandlerDidNotCompleteError()
            if self.on_handler_returned is not None:
                self.on_handler_returned()
            await attempt.close_success()
            written = True
        except asyncio.CancelledError:
            # Still held: the worker hands the job back (or its lease runs out).
            await attempt.close_failure(asyncio.CancelledError())
            raise
        except OWNERSHIP_LOSSES as error:
            await attempt.close_failure(error)
            if scope is not None:
                scope.error(error)
            reason = reason_for_error(error)
            attempt.signal.abort(reason)
            if reason is AbortReason.SHUTDOWN:
                # The job is still ours: hand it back now rather than when the lease expires.
                await self._reschedule(error)
            else:
                self.on_event("job_attempt_" + reason.value, self.job, {})
            written = True
        except BaseException as error:
            await attempt.close_failure(error)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            if scope is not None:
                scope.error(error)
            # Reported as timed out only when the deadline itself failed the attempt (the
            # handler still ran at its deadline), once that failure is recorded.
            overran: float | None = None
            if deadline is not None and deadline.failed and isinstance(error, JobTimeoutError):
                overran = deadline.seconds
            await self._reschedule(error, timed_out=overran)
            written = True
        else:
            completed = attempt.completed
            if completed.waiting_for:
                self.on_event(
                    "job_attempt_waiting",
                    self.job,
                    {"blocker_chain_ids": list(completed.waiting_for), "status": completed.job.status.value},
                )
            else:
                self.on_event(
                    "job_attempt_completed", self.job, {"continued": completed.continuation is not None}
                )
        finally:
            if written and self._on_settled is not None:
                self._on_settled()
            await self._stop_staged()

    async def renew_then_run(self, still_held: Callable[[], bool] | None = None) -> None:
        """For a job that waited in the worker's buffer: extend its lease first, then run it.

        A job taken meanwhile (lease lost, deleted, completed) is dropped without running; so
        is one whose renewal failed when ``still_held()`` says its local deadline has passed.
        """
        sent = self._now()
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
            self.lease_deadline = local_deadline(sent, self.settings.lease.duration.total_seconds())
        except OWNERSHIP_LOSSES as lost:
            self.on_event("job_attempt_" + reason_for_error(lost).value, self.job, {})
            return
        except Exception:  # transient: the lease may still hold, and the attempt's writes are fenced
            log.warning("could not renew buffered job %s before starting it", self.job.id, exc_info=True)
            if still_held is not None and not still_held():
                self.on_event("job_claim_expired", self.job, {})
                return
        await self.run()

    async def _invoke(self, attempt: Attempt[Any, Any]) -> None:
        processor = self.processor
        deadline = attempt.deadline
        if not processor.is_async:
            await attempt.auto_setup()

            async def run_sync() -> Any:
                if deadline is None:
                    result = await call_in_thread(self.settings.sync_wrapper, processor.handler, attempt)
                else:
                    handler = deadline.timed_in_thread(processor.handler)
                    try:
                        result = await call_in_thread(self.settings.sync_wrapper, handler, attempt)
                    finally:
                        deadline.stop()  # completing its result below is jobchain's work
                if isinstance(result, Continue):
                    return await attempt.continue_with(
                        result.job_type, result.input, schedule=result.schedule, blockers=result.blockers
                    )
                return await attempt.complete(result)

            await run_wrapped(processor.middleware, "wrap_handler", attempt, run_sync)
            return

        async def run_async() -> Any:
            if deadline is None:
                return await processor.handler(attempt)
            return await deadline.timed(processor.handler(attempt))

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
        if not self.watched:
            self.watched = True
            await self._listen()
        attempt = self.attempt
        assert attempt is not None
        if self.lease_deadline is None:
            self.lease_deadline = local_deadline(self._now(), self.settings.lease.duration.total_seconds())
        # Before the handler runs on: reading the signal checks the deadline itself.
        attempt.signal.expire_when(self._past_deadline)
        self._renewal = asyncio.create_task(self._renew_forever())
        self._lease_watch = asyncio.create_task(self._watch_lease())

    async def _listen(self) -> bool:
        """Listen for this job's ownership loss; False when there is no notify adapter (or it failed)."""
        notify = self.client.notify
        if notify is None:
            return False
        try:
            self._unsubscribe = await notify.listen_job_ownership_lost(self.job.id, self._on_ownership_lost)
        except Exception:  # notifications are hints; renewal still detects the loss
            log.warning("could not listen for ownership loss of job %s", self.job.id, exc_info=True)
            return False
        return True

    def watch(self) -> None:
        """Called by the worker's watch once a non-staged attempt has run a while: from now on
        it learns of a cancellation (or any loss of its job) within a second, as staged
        attempts do; without notifications, by reading its job every renewal interval."""
        attempt = self.attempt
        if self.watched or attempt is None or attempt.signal.aborted:
            return
        self.watched = True
        self._watch = asyncio.get_running_loop().create_task(self._watch_long_attempt(attempt))

    async def _watch_long_attempt(self, attempt: Attempt[Any, Any]) -> None:
        listening = await self._listen()
        # A loss published before the subscription was live went unheard: read once.
        await self._check_ownership()
        if listening:
            return
        every = self.settings.lease.renew_every.total_seconds()
        while not attempt.signal.aborted and attempt.completed is None:
            await asyncio.sleep(every)
            await self._check_ownership()

    async def _stop_staged(self) -> None:
        tasks = [task for task in (self._renewal, self._watch, self._lease_watch) if task is not None]
        self._renewal = self._watch = self._lease_watch = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            try:
                await unsubscribe()
            except Exception:
                log.debug("unsubscribe failed", exc_info=True)

    def _on_ownership_lost(self, _job_id: str) -> None:
        attempt = self.attempt
        if attempt is not None and not attempt.signal.aborted and attempt.completed is None:
            asyncio.get_running_loop().create_task(self._check_ownership())

    async def _check_ownership(self) -> None:
        attempt = self.attempt
        if attempt is None or attempt.signal.aborted or attempt.completed is not None:
            return
        try:
            async with self.client.state.transaction(read_only=True) as tx:
                current = await tx.job_get(JobGet(job_id=self.job.id))
        except Exception:  # a hint only: the attempt's own writes are fenced anyway
            log.debug("could not read job %s to check its ownership", self.job.id, exc_info=True)
            return
        reason = reason_for(current, self.worker_id, self.job.lease_generation)
        if reason is not None and attempt.completed is None:
            attempt.signal.abort(reason)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _renew_forever(self) -> None:
        lease = self.settings.lease
        attempt = self.attempt
        assert attempt is not None
        seconds = lease.duration.total_seconds()
        while not attempt.signal.aborted:
            await asyncio.sleep(lease.renew_every.total_seconds())
            sent = self._now()
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
                self.lease_deadline = local_deadline(sent, seconds)
                self.on_event("job_attempt_lease_renewed", self.job, {})
            except OWNERSHIP_LOSSES as error:
                attempt.signal.abort(reason_for_error(error))
                return
            except Exception:
                # A transient failure: keep trying; the lease watch gives up at the deadline.
                log.warning("lease renewal of job %s failed", self.job.id, exc_info=True)

    async def _watch_lease(self) -> None:
        """Fire ``lease_expired`` once the local deadline passes with no renewal confirmed,
        whether or not the renewal in flight ever answers (a partition, a hung driver)."""
        attempt = self.attempt
        assert attempt is not None
        lease = self.settings.lease
        step = lease.renew_every.total_seconds()
        signal = attempt.signal
        while True:
            if signal.reason is not None or attempt.completed is not None:
                break
            await asyncio.sleep(min(max(self._remaining(), 0.0), step))
        if signal.reason is AbortReason.LEASE_EXPIRED and attempt.completed is None:
            # The attempt's own end reports job_attempt_lease_expired once its handler returns.
            self.on_event("job_lease_expired_locally", self.job, {})
            if self._on_lease_expired is not None:
                self._on_lease_expired()

    def _remaining(self) -> float:
        deadline = self.lease_deadline
        return float("inf") if deadline is None else deadline - self._now()

    def _past_deadline(self) -> bool:
        return self._remaining() <= 0 or (self._lapsed is not None and self._lapsed())

    async def _reschedule(self, error: BaseException, *, timed_out: float | None = None) -> None:
        await record_failure(
            self.client, self.job, self.worker_id, self.settings, self.on_event, error, timed_out=timed_out
        )


reschedule_attempt = record_failure
"""The former name of :func:`jobchain.worker.failures.record_failure`."""
