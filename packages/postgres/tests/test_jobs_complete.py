"""PostgresStateTx.jobs_complete: many completions in one pipeline, each decided as job_complete would."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from jobchain.contracts import (
    ChainGet,
    CompletesJobsInBatches,
    JobComplete,
    JobCompleted,
    JobGet,
    JobsAcquire,
    JobsCreate,
    NewJob,
)
from jobchain.entities import JobStatus, new_id
from jobchain.errors import JobAlreadyCompletedError, JobNotFoundError, JobTakenByAnotherWorkerError
from jobchain_postgres import PostgresStateAdapter

from .test_statements import until_lock_wait

LEASE = timedelta(seconds=30)


def _new(type_name: str, **fields: object) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)  # type: ignore[arg-type]


async def test_each_completion_is_decided_on_its_own_in_one_call(pg_state: PostgresStateAdapter) -> None:
    mine, stolen, done_before, blocker = _new("t"), _new("t"), _new("t"), _new("t")
    dependent = _new("dep", blocker_chain_ids=[blocker.id])
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[mine, stolen, done_before, blocker, dependent]))
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=4)
        )
    generation = {job.id: job.lease_generation for job in claimed.jobs}
    async with pg_state.transaction() as tx:
        await tx.job_complete(JobComplete(job_id=done_before.id, worker_id="w"))

    async with pg_state.transaction() as tx:
        assert isinstance(tx, CompletesJobsInBatches)
        results = await tx.jobs_complete(
            [
                JobComplete(
                    job_id=mine.id, output={"n": 1}, worker_id="w", lease_generation=generation[mine.id]
                ),
                JobComplete(job_id=stolen.id, worker_id="w", lease_generation=generation[stolen.id] + 1),
                JobComplete(job_id="not-a-uuid", worker_id="w"),
                JobComplete(job_id=done_before.id, worker_id="w"),
                JobComplete(job_id=blocker.id, output=[1, 2], worker_id="w"),
            ]
        )
    assert [type(r) for r in results] == [
        JobCompleted,
        JobTakenByAnotherWorkerError,
        JobNotFoundError,
        JobAlreadyCompletedError,
        JobCompleted,
    ]
    first, last = results[0], results[4]
    assert isinstance(first, JobCompleted)
    assert isinstance(last, JobCompleted)
    assert first.job.output == {"n": 1}
    assert first.chain_completed
    assert first.was_running
    assert [job.id for job in last.unblocked_jobs] == [dependent.id]

    async with pg_state.transaction(read_only=True) as tx:
        untouched = await tx.job_get(JobGet(job_id=stolen.id))
        released = await tx.job_get(JobGet(job_id=dependent.id))
    assert untouched is not None
    assert untouched.status is JobStatus.RUNNING
    assert released is not None
    assert released.status is JobStatus.PENDING


async def test_a_job_held_by_another_transaction_takes_the_slow_path(
    pg_state: PostgresStateAdapter, postgres_url: str
) -> None:
    held, free = _new("t"), _new("t")
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[held, free]))
        await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=2))

    locked, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with pg_state.transaction() as tx:
            # A row lock (job_get's lock is an advisory hold, which completions do not wait for).
            await tx.chain_get(ChainGet(chain_id=held.id, lock=True))
            locked.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await locked.wait()

    pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def complete_both() -> list[JobCompleted | Exception]:
        async with pg_state.transaction() as tx:
            pid.set_result(tx.connection.info.backend_pid)
            return list(
                await tx.jobs_complete(
                    [JobComplete(job_id=free.id, worker_id="w"), JobComplete(job_id=held.id, worker_id="w")]
                )
            )

    completing = asyncio.create_task(complete_both())
    # Waits for the holder, as job_complete does.
    await until_lock_wait(postgres_url, await pid, completing, "jobs_complete did not wait for the held row")
    release.set()
    await holder
    results = await completing
    assert all(isinstance(r, JobCompleted) for r in results)
    assert [r.job.id for r in results if isinstance(r, JobCompleted)] == [free.id, held.id]


async def test_blockers_completing_together_release_their_dependents_exactly(
    pg_state: PostgresStateAdapter,
) -> None:
    a, b, c = _new("t"), _new("t"), _new("t")
    both = _new("dep", blocker_chain_ids=[a.id, b.id])
    all_three = _new("dep", blocker_chain_ids=[a.id, b.id, c.id])
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[a, b, c, both, all_three]))
        await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=3))
    async with pg_state.transaction() as tx:
        results = await tx.jobs_complete(
            [JobComplete(job_id=a.id, worker_id="w"), JobComplete(job_id=b.id, worker_id="w")]
        )
    first, second = results
    assert isinstance(first, JobCompleted)
    assert isinstance(second, JobCompleted)
    assert first.unblocked_jobs == []
    assert [job.id for job in second.unblocked_jobs] == [both.id]
    async with pg_state.transaction(read_only=True) as tx:
        released = await tx.job_get(JobGet(job_id=both.id))
        waiting = await tx.job_get(JobGet(job_id=all_three.id))
    assert released is not None
    assert released.status is JobStatus.PENDING
    assert waiting is not None
    assert waiting.status is JobStatus.BLOCKED
    async with pg_state.transaction() as tx:
        [last] = await tx.jobs_complete([JobComplete(job_id=c.id, worker_id="w")])
    assert isinstance(last, JobCompleted)
    assert [job.id for job in last.unblocked_jobs] == [all_three.id]


async def test_outputs_and_times_are_stored_as_job_complete_stores_them(
    pg_state: PostgresStateAdapter,
) -> None:
    grouped, alone = _new("t"), _new("t")
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[grouped, alone]))
        await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=2))
    at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    async with pg_state.transaction() as tx:
        [result] = await tx.jobs_complete([JobComplete(job_id=grouped.id, worker_id="w", now=at)])
        await tx.job_complete(JobComplete(job_id=alone.id, worker_id="w", now=at))
    assert isinstance(result, JobCompleted)
    assert result.job.completed_at == at
    async with pg_state.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            f"SELECT output IS NULL, output = 'null'::jsonb, completed_at FROM {pg_state.options.schema}."
            f"{pg_state.options.table_prefix}job WHERE id = ANY(%s) ORDER BY id = %s DESC",
            ([grouped.id, alone.id], grouped.id),
        )
        rows = await cursor.fetchall()
    assert rows[0] == rows[1] == (False, True, at)
