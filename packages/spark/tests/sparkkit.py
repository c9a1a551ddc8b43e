"""Test kit imported by the tests and by Spark's Python workers: job types and seeding.

Seeding drives the state adapter's own operations with an explicit ``now``, so histories
with exact timestamps, attempts and errors are produced by the real backend code paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobchain import JobTypes
from jobchain.connect_backends import open_state
from jobchain.contracts.state import (
    ChainsCancel,
    ChainsCancelled,
    JobComplete,
    JobFail,
    JobFailed,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    NewJob,
    StateAdapter,
)
from jobchain.entities import AttemptError, Job, Schedule, new_id

T0 = datetime(2024, 3, 1, tzinfo=UTC)

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JVM options of the tests' Spark drivers (the session fixture's, the command-line tests'
child processes'). The tests run hundreds of small queries and no long hot loop: C2's
compilations cost more CPU than they save (measured: the JVM's CPU time per report about
halved with C1 alone, on two cores), and serial GC needs no collector threads for a 512 MB
heap. They change how fast the JVM runs, not what Spark computes."""


@dataclass
class Email:
    to: str
    subject: str
    priority: int = 0


types = JobTypes()
send_email = types.define("send_email", input=Email, output=None, entry=True)
resize = types.define("resize", input=dict[str, Any], output=None, entry=True)
notify_step = types.define("notify_step", input=dict[str, Any], output=None)


async def migrate(url: str) -> None:
    state = await open_state(url)
    try:
        await state.migrate()
    finally:
        await state.close()


async def create(
    state: StateAdapter,
    type_name: str,
    count: int,
    now: datetime,
    *,
    input: Any = None,
    blockers: tuple[str, ...] = (),
    runs_after_failed_blockers: bool = False,
) -> list[Job]:
    jobs = [
        NewJob(
            id=new_id(),
            type_name=type_name,
            chain_type_name=type_name,
            input=input if input is not None else {"n": i},
            blocker_chain_ids=blockers,
            runs_after_failed_blockers=runs_after_failed_blockers,
        )
        for i in range(count)
    ]
    async with state.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=jobs, now=now))
    return [c.job for c in created]


async def run(
    state: StateAdapter,
    job: Job | str,
    *,
    started: datetime,
    finished: datetime,
    fail_with: str | None = None,
    retry_at: datetime | None = None,
    continue_with: str | None = None,
    error_type: str | None = None,
    give_up: bool = False,
) -> Job:
    """Claim ``job`` (or the oldest eligible job of that type name) at ``started``, then complete
    it (or fail it, or continue its chain) at ``finished``.

    ``fail_with`` fails the attempt: rescheduled at ``retry_at``, or failed for good with
    ``give_up`` (``job_fail``, as a worker does when no attempts are left). With
    ``error_type`` the failure is appended to the error history as the worker records it."""
    type_name = job if isinstance(job, str) else job.type_name
    async with state.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=[type_name], worker_id="w1", lease_for=timedelta(hours=1), now=started)
        )
    # Seed one job at a time: the claim takes the oldest eligible job, which must be this one.
    claimed = [j.id for j in acquired.jobs]
    assert len(claimed) == 1, f"nothing to claim for {type_name} at {started}"
    if not isinstance(job, str):
        assert claimed == [job.id], f"expected to claim {job.id}, got {claimed}"
    job = acquired.jobs[0]
    async with state.transaction() as tx:
        recorded = (
            None
            if error_type is None or fail_with is None
            else AttemptError(
                attempt=job.attempt, worker_id="w1", error_type=error_type, message=fail_with, at=finished
            )
        )
        if fail_with is not None and give_up:
            failed = await tx.job_fail(
                JobFail(job_id=job.id, error=fail_with, worker_id="w1", attempt_error=recorded, now=finished)
            )
            return failed.job
        if fail_with is not None:
            return await tx.job_reschedule(
                JobReschedule(
                    job_id=job.id,
                    schedule=Schedule(at=retry_at or finished),
                    error=fail_with,
                    worker_id="w1",
                    attempt_error=recorded,
                    now=finished,
                )
            )
        if continue_with is not None:
            await tx.jobs_create(
                JobsCreate(
                    jobs=[
                        NewJob(
                            id=new_id(),
                            type_name=continue_with,
                            chain_type_name=job.chain_type_name,
                            chain_id=job.chain_id,
                            chain_index=job.chain_index + 1,
                            input={"from": job.id},
                        )
                    ],
                    now=finished,
                )
            )
        done = await tx.job_complete(
            JobComplete(job_id=job.id, output={"ok": True}, worker_id="w1", now=finished)
        )
        return done.job


async def fail(state: StateAdapter, job: Job, *, at: datetime, error: str) -> JobFailed:
    """Fail ``job`` for good without a worker (as an operator's tooling may), at ``at``."""
    async with state.transaction() as tx:
        return await tx.job_fail(JobFail(job_id=job.id, error=error, now=at))


async def cancel(
    state: StateAdapter, chain_ids: list[str], *, at: datetime, reason: str | None = None
) -> ChainsCancelled:
    """Cancel chains at ``at`` (``client.cancel_chains`` without the notifications)."""
    async with state.transaction() as tx:
        result = await tx.chains_cancel(ChainsCancel(chain_ids=chain_ids, reason=reason, now=at))
    assert not result.not_found, result
    assert not result.not_cancellable, result
    return result


async def claim(state: StateAdapter, job: Job, *, at: datetime) -> Job:
    """Claim ``job`` at ``at`` and leave it running (a one-hour lease)."""
    async with state.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=[job.type_name], worker_id="w1", lease_for=timedelta(hours=1), now=at)
        )
    assert [j.id for j in acquired.jobs] == [job.id]
    return acquired.jobs[0]


# ---------------------------------------------------------------- a notify backend that records

WAKES: list[tuple[str, str, int]] = []
"""(call, type_name, count) for every wake hint and scheduled notification, in order."""


async def open_recording_notify(url: Any) -> Any:
    from jobchain.memory.notify import MemoryNotifyAdapter

    class RecordingNotify(MemoryNotifyAdapter):
        async def provide_wake_hint(self, type_name: str, count: int) -> None:
            WAKES.append(("wake_hint", type_name, count))
            await super().provide_wake_hint(type_name, count)

        async def publish_job_scheduled(self, type_name: str) -> None:
            WAKES.append(("scheduled", type_name, 1))
            await super().publish_job_scheduled(type_name)

    return RecordingNotify()


async def count_chains(url: str, type_name: str) -> dict[str, int]:
    """deduplication key -> number of chains of ``type_name`` carrying it."""
    from jobchain import JobTypes, connect

    client = await connect(url, notify="none", job_types=JobTypes())
    counts: dict[str, int] = {}
    try:
        cursor = None
        while True:
            page = await client.list_chains(type_names=[type_name], cursor=cursor, limit=500)
            for chain in page.items:
                key = chain.root.deduplication_key or ""
                counts[key] = counts.get(key, 0) + 1
            cursor = page.next_cursor
            if cursor is None:
                return counts
    finally:
        await client.close()


async def chain_ids(url: str) -> set[str]:
    """The ids of every chain in the state at ``url``, as the client lists them."""
    from jobchain import JobTypes, connect

    client = await connect(url, notify="none", job_types=JobTypes())
    ids: set[str] = set()
    try:
        cursor = None
        while True:
            page = await client.list_chains(cursor=cursor, limit=500)
            ids.update(chain.id for chain in page.items)
            cursor = page.next_cursor
            if cursor is None:
                return ids
    finally:
        await client.close()
