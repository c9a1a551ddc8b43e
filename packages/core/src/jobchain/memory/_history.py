"""Error history and terminal-status rows of the in-process state backend.

Pure functions from a job (and what happened to it) to its next version, shared by the write
operations (``_writes``), the lifecycle operations (``_lifecycle``) and rescue (``_workers``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from jobchain.entities import ATTEMPT_ERRORS_KEPT, AttemptError, Job, JobStatus

BLOCKER_FAILED = "BlockerChainFailed"
BLOCKER_CANCELLED = "BlockerChainCancelled"
ATTEMPT_ABANDONED = "AttemptAbandoned"


def with_error(errors: tuple[AttemptError, ...], entry: AttemptError | None) -> tuple[AttemptError, ...]:
    """``errors`` with ``entry`` appended, the oldest beyond :data:`ATTEMPT_ERRORS_KEPT` dropped."""
    if entry is None:
        return errors
    return (*errors, entry)[-ATTEMPT_ERRORS_KEPT:]


def abandoned(job: Job, message: str, now: datetime) -> tuple[AttemptError, ...]:
    """The history of a running job whose attempt was abandoned (reaped or released)."""
    entry = AttemptError(
        attempt=job.attempt, worker_id=job.leased_by, error_type=ATTEMPT_ABANDONED, message=message, at=now
    )
    return with_error(job.attempt_errors, entry)


def blocker_message(blocker: Job) -> str:
    """``last_attempt_error`` of a job failed by ``blocker``'s chain (``blocker`` is its last job)."""
    what = "was cancelled" if blocker.status is JobStatus.CANCELLED else "failed"
    return f"blocker chain {blocker.chain_id} ({blocker.chain_type_name}) {what}"


def failed_by_blocker(job: Job, blocker: Job, now: datetime) -> Job:
    """``job`` failed because ``blocker`` (a failed or cancelled chain's last job) ended its chain."""
    message = blocker_message(blocker)
    error_type = BLOCKER_CANCELLED if blocker.status is JobStatus.CANCELLED else BLOCKER_FAILED
    entry = AttemptError(attempt=job.attempt, worker_id=None, error_type=error_type, message=message, at=now)
    return replace(
        job,
        status=JobStatus.FAILED,
        failed_at=now,
        failed_by_chain_id=blocker.chain_id,
        last_attempt_error=message,
        attempt_errors=with_error(job.attempt_errors, entry),
        leased_by=None,
        leased_until=None,
    )


def resolved(blocker: Job | None, *, runs_after_failed_blockers: bool) -> bool:
    """Whether a blocker chain (given by its last job, None once deleted) no longer blocks a job."""
    if blocker is None or blocker.status is JobStatus.COMPLETED:
        return True  # a vanished chain no longer blocks
    return runs_after_failed_blockers and blocker.status.terminal


def ended_badly(blocker: Job | None) -> bool:
    """The blocker chain (given by its last job) is failed or cancelled."""
    return blocker is not None and blocker.status in (JobStatus.FAILED, JobStatus.CANCELLED)


def redriven(job: Job, status: JobStatus, scheduled_at: datetime) -> Job:
    """``job`` back in play with a fresh attempt budget: what a retry resets (history kept)."""
    return replace(
        job,
        status=status,
        scheduled_at=scheduled_at,
        attempt_base=job.attempt,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        failed_by_chain_id=None,
        leased_by=None,
        leased_until=None,
    )
