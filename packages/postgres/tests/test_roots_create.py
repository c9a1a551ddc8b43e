"""jobs_create's fast path for plain new chains (``sql/jobs_create_roots.sql``).

The fast path builds the returned jobs from what it wrote plus what the server decided; these
tests read every job back and require the two to be equal, and check that a colliding id still
writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts import JobGet, JobsCreate, JobsList, NewJob
from jobchain.entities import JobStatus, Schedule, new_id
from jobchain.errors import DuplicateJobIdError
from jobchain_postgres import PostgresStateAdapter

NOW = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _root(**fields: object) -> NewJob:
    return NewJob(id=new_id(), type_name="t", chain_type_name="t", **fields)  # type: ignore[arg-type]


async def test_returned_jobs_equal_what_is_stored(pg_state: PostgresStateAdapter) -> None:
    batch = [
        _root(),
        _root(input={"b": [1, 2.5, None, "x"], "a": {"nested": True}}),
        _root(input="text", schedule=Schedule(after=timedelta(seconds=90))),
        _root(input=7, schedule=Schedule(at=NOW + timedelta(hours=1))),
        # A time in the past is clamped to the statement's clock.
        _root(input=[], schedule=Schedule(at=NOW - timedelta(days=1))),
        _root(trace_context={"traceparent": "00-abc-def-01"}, chain_trace_context={"k": "v"}),
    ]
    async with pg_state.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=batch, now=NOW))
    async with pg_state.transaction(read_only=True) as tx:
        stored = [await tx.job_get(JobGet(job_id=job.id)) for job in batch]

    assert [item.job for item in created] == stored
    assert all(not item.deduplicated and item.incomplete_blocker_chain_ids == () for item in created)
    jobs = [item.job for item in created]
    assert [job.id for job in jobs] == [job.id for job in batch]
    assert all(job.status is JobStatus.PENDING and job.chain_id == job.id for job in jobs)
    assert [job.scheduled_at for job in jobs] == [
        NOW,
        NOW,
        NOW + timedelta(seconds=90),
        NOW + timedelta(hours=1),
        NOW,
        NOW,
    ]
    assert all(job.created_at == NOW for job in jobs)


async def test_server_clock_is_used_without_now(pg_state: PostgresStateAdapter) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    job = _root()
    async with pg_state.transaction() as tx:
        [created] = await tx.jobs_create(JobsCreate(jobs=[job]))
    async with pg_state.transaction(read_only=True) as tx:
        stored = await tx.job_get(JobGet(job_id=job.id))
    assert created.job == stored
    assert created.job.created_at >= before
    assert created.job.created_at.tzinfo is UTC


async def test_a_colliding_id_writes_none_of_the_batch(pg_state: PostgresStateAdapter) -> None:
    existing = _root()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[existing], now=NOW))
    fresh = _root()
    again = NewJob(id=existing.id, type_name="t", chain_type_name="t")
    with pytest.raises(DuplicateJobIdError) as raised:
        async with pg_state.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[fresh, again], now=NOW))
    assert existing.id in str(raised.value)
    async with pg_state.transaction(read_only=True) as tx:
        page = await tx.jobs_list(JobsList())
    assert [job.id for job in page.items] == [existing.id]
