"""Shared pieces of the client lifecycle and await cases: job types, failing a job through the
state transaction, reading states back, waiters that are surely waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from jobchain import AttemptError, Chain, Client, FailJob, Job, JobStatus, JobTypes, Schedule
from jobchain.completion import buffer_failed
from jobchain.contracts.state import JobFail, JobFailed
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state

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


async def awaiting(
    env: IntegrationEnv,
    types: JobTypes,
    chain_id: str,
    *,
    poll_interval: float | None = None,
    waiters: int = 1,
) -> list[asyncio.Future[Chain]]:
    """Start ``waiters`` ``await_chain`` calls; return once each has made its first check.

    A wait subscribes to the chain's notice before its first check, so whatever the case does
    next happens while the chain is awaited, never before it (no sleep decides the order).
    Each waiter reads through a counting proxy of its own, so the check counted is its own.
    """
    poll = env.poll_interval if poll_interval is None else poll_interval
    proxies = [StateProxy(env.state) for _ in range(waiters)]
    futures: list[asyncio.Future[Chain]] = [
        asyncio.ensure_future(
            env.client(types, state=as_state(proxy)).await_chain(
                chain_id, timeout=env.wait_timeout, poll_interval=poll
            )
        )
        for proxy in proxies
    ]

    async def checked() -> bool:
        # A waiter that already ended (an error) lets the case see its outcome at once.
        return all(p.calls["chain_get"] > 0 or f.done() for p, f in zip(proxies, futures, strict=True))

    await env.wait_for(checked, f"{waiters} waiter(s) to make their first check")
    return futures
