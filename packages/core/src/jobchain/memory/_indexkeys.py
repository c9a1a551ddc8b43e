"""The sort keys of the in-process state backend's per-type indexes (pending, priority, leases)."""

from __future__ import annotations

from datetime import datetime

from jobchain.entities import Job, JobStatus

PendingKey = tuple[datetime, datetime, str]  # (scheduled_at, created_at, id): acquisition order
PriorityKey = tuple[int, datetime, datetime, str]  # (-priority, scheduled_at, created_at, id)
LeaseKey = tuple[datetime, str]  # (leased_until, id): reaping order


def pending_key(job: Job | None) -> PendingKey | None:
    if job is None or job.status is not JobStatus.PENDING:
        return None
    return (job.scheduled_at, job.created_at, job.id)


def priority_key(job: Job | None) -> PriorityKey | None:
    """Pending jobs with a priority other than 0 (the partial priority index of the SQL backends)."""
    if job is None or job.status is not JobStatus.PENDING or job.priority == 0:
        return None
    return (-job.priority, job.scheduled_at, job.created_at, job.id)


def lease_key(job: Job | None) -> LeaseKey | None:
    if job is None or job.status is not JobStatus.RUNNING or job.leased_until is None:
        return None
    return (job.leased_until, job.id)


def holder_of(job: Job | None) -> str | None:
    """The worker whose lease the job runs under (None unless running)."""
    return None if job is None or job.status is not JobStatus.RUNNING else job.leased_by
