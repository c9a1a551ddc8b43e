"""Ordered keys and waits under concurrency on PostgreSQL, in separate connections.

Creations of one key serialize on the key's ordering_key row (``sql/jobs_ordering_lock.sql``):
the second waits for the first's commit and is ordered after it, or after nothing if the first
rolled back. A blocker chain that ends while a creation or a wait reads it is waited for and
seen, so the dependent is never left blocked by a chain that already ended. Races are held open
by a transaction the test keeps open, with pg_stat_activity telling when a backend waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain.contracts import (
    JobComplete,
    JobCreated,
    JobGet,
    JobsAcquire,
    JobsCreate,
    NewJob,
)
from jobchain.contracts.scheduling import JobWait, JobWaited
from jobchain.entities import Job, JobStatus, new_id
from jobchain_postgres import PostgresStateAdapter
from jobchain_postgres.options import Claim

from .conftest import open_state
from .test_statements import until_lock_wait

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
CLAIM = JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, now=NOW)


def root(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


@pytest.fixture(params=["skip-locked", "atomic-update"])
async def pair(
    request: pytest.FixtureRequest, postgres_url: str, schema_name: str
) -> AsyncIterator[tuple[PostgresStateAdapter, PostgresStateAdapter]]:
    """Two adapters (two pools, so two connections) on one schema, in one claim mode."""
    claim: Claim = request.param
    first = await open_state(postgres_url, schema_name, claim)
    second = await open_state(postgres_url, schema_name, claim)
    yield first, second
    await first.close()
    await second.close()


async def create_in(adapter: PostgresStateAdapter, job: NewJob) -> JobCreated:
    async with adapter.transaction() as tx:
        [created] = await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
    return created


async def get(adapter: PostgresStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        job = await tx.job_get(JobGet(job_id=job_id))
    assert job is not None
    return job


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_a_second_creator_of_a_key_waits_for_the_first_and_is_ordered_after_it(
    pair: tuple[PostgresStateAdapter, PostgresStateAdapter], postgres_url: str, outcome: str
) -> None:
    one, two = pair
    first, second = root(ordering_key="k"), root(ordering_key="k")

    class RollbackError(Exception):
        pass

    with pytest.raises(RollbackError) if outcome == "rollback" else contextlib.nullcontext():
        async with one.transaction() as tx:
            [created] = await tx.jobs_create(JobsCreate(jobs=[first], now=NOW))
            assert created.ordered_after is None
            async with two.transaction() as probe:
                pid = probe.connection.info.backend_pid
            waiting = asyncio.create_task(create_in(two, second))
            await until_lock_wait(postgres_url, pid, waiting, "the second creator did not wait for the key")
            assert not waiting.done()
            if outcome == "rollback":
                raise RollbackError
    later = await asyncio.wait_for(waiting, 30)
    if outcome == "commit":
        assert (later.ordered_after, later.job.status) == (first.id, JobStatus.BLOCKED)
        assert later.incomplete_blocker_chain_ids == (first.id,)
    else:
        assert (later.ordered_after, later.job.status) == (None, JobStatus.PENDING)
    assert await get(two, second.id) == later.job


async def test_a_previous_chain_completed_under_the_creation_leaves_the_next_chain_pending(
    pair: tuple[PostgresStateAdapter, PostgresStateAdapter], postgres_url: str
) -> None:
    one, two = pair
    first, second = root(ordering_key="k"), root(ordering_key="k")
    await create_in(one, first)
    async with two.transaction() as probe:
        pid = probe.connection.info.backend_pid
    async with one.transaction() as tx:  # the completion, open while the next chain is created
        await tx.job_complete(JobComplete(job_id=first.id, now=NOW))
        creating = asyncio.create_task(create_in(two, second))
        await until_lock_wait(postgres_url, pid, creating, "the creation did not wait for the completion")
    created = await asyncio.wait_for(creating, 30)
    # Decided again after the completion committed: ordered after it, and not held by it.
    assert (created.ordered_after, created.job.status) == (first.id, JobStatus.PENDING)
    assert created.incomplete_blocker_chain_ids == ()


async def test_a_wait_for_a_chain_completed_under_it_leaves_the_job_pending(
    pair: tuple[PostgresStateAdapter, PostgresStateAdapter], postgres_url: str
) -> None:
    one, two = pair
    job, child = root(), root("child")
    await create_in(one, child)
    async with one.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, now=NOW)
        )
    [running] = claimed.jobs
    async with two.transaction() as probe:
        pid = probe.connection.info.backend_pid

    async def wait() -> JobWaited:
        params = JobWait(
            job_id=job.id,
            worker_id="w",
            blocker_chain_ids=[child.id],
            lease_generation=running.lease_generation,
            now=NOW,
        )
        async with two.transaction() as tx:
            return await tx.job_wait(params)

    async with one.transaction() as tx:
        await tx.job_complete(JobComplete(job_id=child.id, now=NOW))
        waiting = asyncio.create_task(wait())
        await until_lock_wait(postgres_url, pid, waiting, "the wait did not wait for the completion")
    waited = await asyncio.wait_for(waiting, 30)
    assert (waited.job.status, waited.incomplete_blocker_chain_ids) == (JobStatus.PENDING, ())
    assert await get(two, job.id) == waited.job


async def test_a_completion_after_a_committed_wait_releases_the_job(
    pair: tuple[PostgresStateAdapter, PostgresStateAdapter], postgres_url: str
) -> None:
    one, two = pair
    job, child = root(), root("child")
    async with one.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job, child], now=NOW))
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, now=NOW)
        )
    [running] = claimed.jobs
    async with one.transaction() as probe:
        pid = probe.connection.info.backend_pid
    async with two.transaction() as tx:  # the wait, open while the child completes
        waited = await tx.job_wait(
            JobWait(
                job_id=job.id,
                worker_id="w",
                blocker_chain_ids=[child.id],
                lease_generation=running.lease_generation,
                now=NOW,
            )
        )
        assert waited.job.status is JobStatus.BLOCKED

        async def complete() -> Any:
            async with one.transaction() as other:
                return await other.job_complete(JobComplete(job_id=child.id, now=NOW))

        completing = asyncio.create_task(complete())
        await until_lock_wait(postgres_url, pid, completing, "the completion did not wait for the wait")
    completed = await asyncio.wait_for(completing, 30)
    assert [j.id for j in completed.unblocked_jobs] == [job.id]
    assert (await get(one, job.id)).status is JobStatus.PENDING


async def test_keyed_creations_in_autocommit_keep_their_order(pg_state: PostgresStateAdapter) -> None:
    first, second = root(ordering_key="k"), root(ordering_key="k")
    async with pg_state.autocommit() as tx:
        [a] = await tx.jobs_create(JobsCreate(jobs=[first], now=NOW))
        [b] = await tx.jobs_create(JobsCreate(jobs=[second], now=NOW))
    assert (a.ordered_after, b.ordered_after) == (None, first.id)
    assert (await get(pg_state, second.id)).status is JobStatus.BLOCKED
