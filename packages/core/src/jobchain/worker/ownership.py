"""Whether an attempt still owns its job, and why not: the abort reason of each refusal.

A refusal (renewal, completion, reschedule or failure of a job the attempt no longer owns)
is a lease loss, never an error of the job: the attempt stops quietly and writes nothing.
A cancelled job's refusal (:class:`~jobchain.errors.JobCancelledError`) is one of them: its
attempt aborts with :attr:`AbortReason.CANCELLED`.
"""

from __future__ import annotations

from jobchain.entities import Job, JobStatus
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobCancelledError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain.worker.abort import AbortReason, AttemptAbortedError

OWNERSHIP_LOSSES = (
    JobNotFoundError,
    JobAlreadyCompletedError,
    JobTakenByAnotherWorkerError,
    JobCancelledError,
    AttemptAbortedError,
)
"""The errors that mean the attempt no longer owns its job (or must stop): nothing to retry."""


def reason_for(job: Job | None, worker_id: str, lease_generation: int) -> AbortReason | None:
    """Why this worker no longer owns ``job`` (None if it still does)."""
    if job is None:
        return AbortReason.NOT_FOUND
    status = job.status
    if status is JobStatus.COMPLETED:
        return AbortReason.ALREADY_COMPLETED
    if status is JobStatus.CANCELLED:
        return AbortReason.CANCELLED
    if (
        status is not JobStatus.RUNNING
        or job.leased_by != worker_id
        or job.lease_generation != lease_generation
    ):
        return AbortReason.TAKEN_BY_ANOTHER_WORKER
    return None


def reason_for_error(error: BaseException) -> AbortReason:
    """The abort reason a refusal stands for (ERROR for anything else)."""
    if isinstance(error, JobCancelledError):  # before its base class, LeaseLostError's others
        return AbortReason.CANCELLED
    if isinstance(error, JobNotFoundError):
        return AbortReason.NOT_FOUND
    if isinstance(error, JobAlreadyCompletedError):
        return AbortReason.ALREADY_COMPLETED
    if isinstance(error, JobTakenByAnotherWorkerError):
        return AbortReason.TAKEN_BY_ANOTHER_WORKER
    if isinstance(error, AttemptAbortedError):
        return error.reason
    return AbortReason.ERROR
