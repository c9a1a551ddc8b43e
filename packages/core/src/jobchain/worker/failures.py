"""What a failed attempt leaves behind: a retry with backoff, or the job failed for good.

A failed attempt is retried (``job_reschedule``) while its job has attempts left. It fails
the job at once (``job_fail``, in the same operation that records the error) when:

* the handler raised :class:`~jobchain.errors.FailJob`, or an exception type listed in its
  job type's ``fail_on``;
* the job used its last attempt: ``job.attempts_used >= max_attempts`` (attempts since its
  last retry; ``max_attempts=None`` never fails it that way). Every claim uses an attempt,
  so a handler's ``RescheduleJobError`` and a timed-out attempt count too: a type that
  reschedules itself often wants a higher limit, or ``None``.

Either way the attempt's error joins the job's error history as an
:class:`~jobchain.entities.AttemptError` (attempt, worker, error type, message, traceback
tail, time). A job handed back at shutdown is not a failure: it is released, due at once,
and keeps its attempt budget (see :func:`over_limit`).

After a failure commits, *chain finished* goes out for the failed job's chain and for every
chain failed with it downstream, *job scheduled* for the dependents that run anyway
(``runs_after_failed_blockers``), and the observers get ``job_failed`` and ``chain_failed``
for each (:func:`jobchain.completion.buffer_failed`). The worker's own event for the attempt is
``job_attempt_failed`` with ``final=True`` and the ``reason``. An attempt its deadline failed
(``timed_out=`` given) reports ``job_timed_out`` just before, once its failure is written, so
every timed-out attempt is also counted as retried or failed (error type JobTimeoutError).

A refusal means the attempt lost its job meanwhile and is reported as such
(``job_attempt_<reason>``), with one exception: a job found completed by this very attempt
(same worker, same lease generation) is this attempt's own completion, whose commit landed
though its writer saw an error. It is reported as ``job_attempt_completed``, not as lost.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from jobchain.completion import buffer_failed
from jobchain.contracts import JobFail, JobFailed, JobReschedule
from jobchain.entities import AttemptError, Job, Schedule
from jobchain.errors import FailJob, JobAlreadyCompletedError, RescheduleJobError
from jobchain.stored_text import storable
from jobchain.worker.abort import AbortReason, AttemptAbortedError
from jobchain.worker.ownership import OWNERSHIP_LOSSES, own_completion, reason_for_error

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.transactions import Transaction
    from jobchain.worker.runner import AttemptSettings

log = logging.getLogger("jobchain.worker")

T = TypeVar("T")

OnEvent = Callable[[str, Job, dict[str, Any]], None]

MAX_ERROR_LENGTH = 10_000

RESCHEDULE_TRIES = 8
"""How often a failed attempt's reschedule (or failure) is tried before the job is left to the reaper."""

RELEASED_ERROR = "released: the worker shut down before the attempt finished"
"""``last_attempt_error`` of a job handed back at shutdown (its attempt did not fail)."""

ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
"""Error type recorded for a job claimed after its last attempt was abandoned."""


def _message_of(error: BaseException) -> str:
    """``str(error)``, or a stand-in when its ``__str__`` (or ``__repr__``) raises or is empty."""
    try:
        return str(error) or repr(error)
    except Exception:  # a handler's own __str__ may raise anything; the attempt is still recorded
        return f"<{type(error).__name__} whose str() raised>"


def _traceback_of(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(error), error, error.__traceback__)).strip()
    except Exception:  # format_exception survives a raising __str__, not every broken exception
        return ""


def describe_error(error: BaseException) -> str:
    """A readable, bounded record of an error for ``last_attempt_error``."""
    text = storable(_traceback_of(error))
    if not text:
        text = f"{type(error).__name__}: {_message_of(error)}"
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 15] + "\n…(truncated)"


def now_of(client: Client) -> datetime:
    """The client's clock (tests inject one), else the current UTC time."""
    return client.clock() if client.clock is not None else datetime.now(UTC)


def attempt_error_of(job: Job, worker_id: str | None, error: BaseException, at: datetime) -> AttemptError:
    """The error-history entry of ``job``'s current attempt failing with ``error``."""
    if isinstance(error, RescheduleJobError):
        message = error.cause or "rescheduled by the handler (no reason given)"
    else:
        message = _message_of(error)
    stack = storable(_traceback_of(error))
    return AttemptError(
        attempt=job.attempt,
        worker_id=worker_id,
        error_type=storable(type(error).__name__),
        message=storable(message),
        traceback=stack or None,
        at=at,
    )


def fail_reason(job: Job, settings: AttemptSettings, error: BaseException) -> str | None:
    """Why this failed attempt fails its job for good (None: retry it).

    ``fail_job`` (the handler raised FailJob), ``fail_on`` (an exception type its job type
    lists) or ``attempts_exhausted``.
    """
    if isinstance(error, AttemptAbortedError) and error.reason is AbortReason.SHUTDOWN:
        return None  # handed back, not failed
    if isinstance(error, FailJob):
        return "fail_job"
    if settings.fail_on and isinstance(error, settings.fail_on):
        return "fail_on"
    limit = settings.max_attempts
    if limit is not None and job.attempts_used >= limit:
        return "attempts_exhausted"
    return None


def over_limit(job: Job, settings: AttemptSettings) -> bool:
    """A claimed job already past its attempt limit: its last attempts were abandoned.

    Its worker died or its lease expired after it had used its last attempt, so it is failed
    without running. A job handed back at shutdown is not: the release gave its attempt back
    (``JobReschedule(released=True)`` raises ``attempt_base``).
    """
    limit = settings.max_attempts
    return limit is not None and job.attempts_used > limit


def _error_attributes(error: BaseException) -> dict[str, Any]:
    return {"error": f"{type(error).__name__}: {_message_of(error)}", "error.type": type(error).__name__}


async def record_failure(
    client: Client,
    job: Job,
    worker_id: str,
    settings: AttemptSettings,
    on_event: OnEvent,
    error: BaseException,
    *,
    timed_out: float | None = None,
) -> None:
    """Hand a failed (or released) attempt's job back with its error and the retry backoff,
    or fail it for good (see the module docstring). Never raises except on cancellation.

    ``timed_out``: the deadline (seconds) that failed this attempt, reported as ``job_timed_out``
    once the failure is written (not when the write is refused: the job was lost meanwhile).
    """
    released = isinstance(error, AttemptAbortedError) and error.reason is AbortReason.SHUTDOWN
    if isinstance(error, RescheduleJobError):
        schedule = error.schedule if isinstance(error.schedule, Schedule) else Schedule(after=timedelta(0))
        message = storable(error.cause or "rescheduled by the handler (no reason given)")
    elif released:
        schedule = Schedule(after=timedelta(0))
        message = RELEASED_ERROR
    else:
        schedule = Schedule(after=settings.retry.delay(job.attempt))
        message = describe_error(error)
    entry = None if released else attempt_error_of(job, worker_id, error, now_of(client))
    reason = fail_reason(job, settings, error)
    if reason is not None:
        request = JobFail(
            job_id=job.id,
            error=message,
            worker_id=worker_id,
            lease_generation=job.lease_generation,
            attempt_error=entry,
        )
        failed = await _write(client, job, worker_id, settings, on_event, lambda tx: _fail(tx, request))
        if failed is not None:
            _timed_out(on_event, job, timed_out)
            on_event("job_attempt_failed", job, _error_attributes(error) | {"final": True, "reason": reason})
        return
    rescheduled = await _write(
        client,
        job,
        worker_id,
        settings,
        on_event,
        lambda tx: _reschedule(
            tx,
            JobReschedule(
                job_id=job.id,
                schedule=schedule,
                error=message,
                worker_id=worker_id,
                lease_generation=job.lease_generation,
                attempt_error=entry,
                released=released,
            ),
        ),
    )
    if rescheduled is not None:
        _timed_out(on_event, job, timed_out)
        on_event(
            "job_attempt_failed",
            job,
            _error_attributes(error) | {"rescheduled_at": rescheduled.scheduled_at.isoformat()},
        )


def _timed_out(on_event: OnEvent, job: Job, timeout: float | None) -> None:
    if timeout is not None:
        on_event("job_timed_out", job, {"timeout": timeout})


async def fail_over_limit(
    client: Client, job: Job, worker_id: str, settings: AttemptSettings, on_event: OnEvent
) -> None:
    """Fail a claimed job that is already past its attempt limit, without running it."""
    message = (
        f"attempt {job.attempts_used} is past the limit of {settings.max_attempts} attempts: "
        "the last attempts were abandoned (worker died or lease expired), so the job fails without running"
    )
    entry = AttemptError(
        attempt=job.attempt,
        worker_id=worker_id,
        error_type=ATTEMPTS_EXHAUSTED,
        message=message,
        at=now_of(client),
    )
    request = JobFail(
        job_id=job.id,
        error=message,
        worker_id=worker_id,
        lease_generation=job.lease_generation,
        attempt_error=entry,
    )
    failed = await _write(client, job, worker_id, settings, on_event, lambda tx: _fail(tx, request))
    if failed is not None:
        on_event(
            "job_attempt_failed",
            job,
            {
                "error": message,
                "error.type": ATTEMPTS_EXHAUSTED,
                "final": True,
                "reason": "attempts_exhausted",
            },
        )


async def _fail(tx: Transaction, request: JobFail) -> JobFailed:
    failed = await tx.state.job_fail(request)
    buffer_failed(tx.hooks, failed, worker_id=request.worker_id)
    return failed


async def _reschedule(tx: Transaction, request: JobReschedule) -> Job:
    rescheduled = await tx.state.job_reschedule(request)
    tx.hooks.job_scheduled(rescheduled.type_name)
    return rescheduled


async def _write(
    client: Client,
    job: Job,
    worker_id: str,
    settings: AttemptSettings,
    on_event: OnEvent,
    write: Callable[[Transaction], Awaitable[T]],
) -> T | None:
    """Run ``write`` in a transaction of its own, again while the store fails and the lease holds.

    A refusal (the job was cancelled, taken, deleted or completed meanwhile) is a quiet lease
    loss: one event, None returned.
    """
    loop = asyncio.get_running_loop()
    lease_ends = loop.time() + settings.lease.duration.total_seconds()
    for tries in range(1, RESCHEDULE_TRIES + 1):
        try:
            async with client.transaction() as tx:
                return await write(tx)
        except OWNERSHIP_LOSSES as lost:
            own = None
            if isinstance(lost, JobAlreadyCompletedError):
                own = await own_completion(client, job, worker_id)
            if own is not None:  # its own completion landed, though its commit raised
                on_event("job_attempt_completed", job, {"continued": own.continued})
            else:
                on_event("job_attempt_" + reason_for_error(lost).value, job, {})
            return None
        except Exception:
            # The store failed too. Leaving the job running would park it until its lease
            # runs out, so try again while the lease holds; past that the reaper has it.
            delay = settings.recovery.delay(tries).total_seconds()
            if tries == RESCHEDULE_TRIES or loop.time() + delay >= lease_ends:
                log.warning(
                    "could not record the failed attempt of job %s; it returns when its lease expires",
                    job.id,
                    exc_info=True,
                )
                return None
            await asyncio.sleep(delay)
    return None
