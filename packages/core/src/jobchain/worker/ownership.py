"""Whether an attempt still owns its job, and why not: the abort reason of each refusal.

A refusal (renewal, completion, reschedule or failure of a job the attempt no longer owns)
is a lease loss, never an error of the job: the attempt stops quietly and writes nothing.
A cancelled job's refusal (:class:`~jobchain.errors.JobCancelledError`) is one of them: its
attempt aborts with :attr:`AbortReason.CANCELLED`.

One refusal is not a loss: ``already completed`` for a job this very attempt completed (same
worker, same lease generation), whose commit landed though its writer saw an error (a
connection lost before the reply). :func:`own_completion` tells the two apart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobchain.contracts import ChainGet, JobGet
from jobchain.entities import Job, JobStatus
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobCancelledError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain.worker.abort import AbortReason, AttemptAbortedError

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")

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


@dataclass(frozen=True, slots=True)
class OwnCompletion:
    """The stored completion of a job by the attempt that asks (see :func:`own_completion`)."""

    job: Job
    continued: bool
    """Whether the completion continued the job's chain (it is not the chain's last job)."""


async def own_completion(client: Client, job: Job, worker_id: str) -> OwnCompletion | None:
    """The completion of ``job`` by the attempt that claimed it as ``job`` (by ``worker_id``, at
    ``job.lease_generation``), if the store holds one; None if another attempt completed it,
    or it cannot be read. Asked only after an ``already completed`` refusal, so it costs
    nothing on the common path."""
    try:
        async with client.state.transaction(read_only=True) as tx:
            current = await tx.job_get(JobGet(job_id=job.id))
            if (
                current is None
                or current.status is not JobStatus.COMPLETED
                or current.completed_by != worker_id
                or current.lease_generation != job.lease_generation
            ):
                return None
            chain = await tx.chain_get(ChainGet(chain_id=job.chain_id))
    except Exception:  # unknown: reported as the refusal it was
        log.debug("could not read job %s to tell its completion's author", job.id, exc_info=True)
        return None
    return OwnCompletion(job=current, continued=chain is not None and chain.last.id != current.id)
