"""Shared pieces of the client lifecycle cases: job types, failing a job through the state
transaction, reading states back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from jobchain import AttemptError, Client, FailJob, Job, JobStatus, JobTypes, Schedule
from jobchain.completion import buffer_failed
from jobchain.contracts.state import JobFail, JobFailed
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total

LATER = Schedule.in_seconds(3600)
"""Keeps a job pending (not due) so no worker takes it."""


async def fail_now(
    env: IntegrationEnv, client: Client, job_id: str, *, error_type: str = "ValueError", message: str = "boom"
) -> JobFailed:
    """Fail a job for good through the state transaction, as a worker whose attempts ran out
    would (one error recorded, propagation included, notifications after commit)."""
    job = await env.job(client, job_id)
    entry = AttemptError(
        attempt=job.attempt, worker_id=None, error_type=error_type, message=message, at=datetime.now(UTC)
    )
    async with client.transaction() as tx:
        failed = await tx.state.job_fail(
            JobFail(job_id=job_id, error=f"{error_type}: {message}", attempt_error=entry)
        )
        buffer_failed(tx.hooks, failed, worker_id=None)
    return failed


async def statuses(env: IntegrationEnv, client: Client, job_ids: Sequence[str]) -> list[JobStatus]:
    """The current status of each job, in order."""
    return [(await env.job(client, job_id)).status for job_id in job_ids]


def fails_until_retried(types: JobTypes, name: str = "flaky", **options: object) -> Processors:
    """An entry type whose handler raises FailJob until the job was retried once
    (``attempt_base > 0``), then completes with ``Total(n)``."""
    flaky = types.define(name, input=Num, output=Total, entry=True, **options)  # type: ignore[call-overload]
    procs = Processors()

    @procs.handler(flaky)
    async def handle(attempt: Attempt[Num, Total]) -> Completed:
        if attempt.job.attempt_base == 0:
            raise FailJob(f"no luck for {attempt.input.n}")
        return await attempt.complete(Total(total=attempt.input.n))

    return procs


def is_status(*wanted: JobStatus) -> Callable[[Job], bool]:
    """A job check for ``env.wait_job``."""

    def check(job: Job) -> bool:
        return job.status in wanted

    return check
