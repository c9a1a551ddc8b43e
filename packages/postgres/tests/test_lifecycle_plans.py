"""Lifecycle statements on PostgreSQL: the atomic hold against reapers and cancels, and the plans
of the new statements (EXPLAIN, never timings)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

from jobchain.contracts import (
    ChainsCancel,
    ChainsPrune,
    JobComplete,
    JobFail,
    JobGet,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsRetry,
    NewJob,
    WorkerHeartbeat,
)
from jobchain.entities import JobStatus, WorkerState, new_id
from jobchain.errors import JobCancelledError
from jobchain_postgres import PostgresStateAdapter
from jobchain_postgres.options import Claim
from jobchain_postgres.queries import Queries

from .conftest import open_state
from .test_migrations import plan
from .test_statements import until_lock_wait

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
PRUNE_ALL_FINISHED: dict[str, Any] = {
    "key": "k",
    "completed_before": NOW + timedelta(days=1),
    "failed_before": NOW + timedelta(days=1),
    "cancelled_before": NOW + timedelta(days=1),
    "locks_before": None,
    "limit": 10,
}
"""chains_prune parameters for plan tests: every finished chain qualifies, batches of 10."""


def _new(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


async def _running(adapter: PostgresStateAdapter, worker: str = "w") -> str:
    job = _new()
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id=worker, lease_for=LEASE, now=NOW)
        )
    assert [j.id for j in claimed.jobs] == [job.id]
    return job.id


@pytest.mark.parametrize("claim", ["skip-locked", "atomic-update"])
async def test_an_atomic_attempts_held_job_is_neither_reaped_nor_released_until_it_ends(
    postgres_url: str, schema_name: str, claim: Claim
) -> None:
    adapter = await open_state(postgres_url, schema_name, claim)
    try:
        job_id = await _running(adapter, worker="gone")
        late = NOW + timedelta(hours=1)
        reap = JobsReapExpired(type_names=["t"], limit=5, now=late)
        beat = WorkerHeartbeat(
            worker_id="alive",
            name="a",
            host="h",
            pid=1,
            version="v",
            type_names=["t"],
            concurrency=1,
            inflight=0,
            state=WorkerState.RUNNING,
            alive_for=LEASE,
            release_dead=True,
            now=late,
        )
        async with adapter.transaction() as tx:  # the dead worker, known to the registry
            await tx.worker_heartbeat(
                WorkerHeartbeat(
                    worker_id="gone",
                    name="g",
                    host="h",
                    pid=2,
                    version="v",
                    type_names=["t"],
                    concurrency=1,
                    inflight=1,
                    state=WorkerState.RUNNING,
                    alive_for=LEASE,
                    now=NOW,
                )
            )
        async with adapter.transaction() as holder:  # the attempt's transaction
            assert (await holder.job_get(JobGet(job_id=job_id, lock=True))) is not None
            async with adapter.transaction() as tx:
                assert await asyncio.wait_for(tx.jobs_reap_expired(reap), 10) == []
            async with adapter.transaction() as tx:
                released = await asyncio.wait_for(tx.worker_heartbeat(beat), 10)
            assert released.released_jobs == []
        async with adapter.transaction() as tx:  # the hold ended with its transaction
            assert [j.id for j in await tx.jobs_reap_expired(reap)] == [job_id]
    finally:
        await adapter.close()


@pytest.mark.parametrize("claim", ["skip-locked", "atomic-update"])
async def test_a_cancel_commits_beside_a_held_attempt_whose_completion_is_then_refused(
    postgres_url: str, schema_name: str, claim: Claim
) -> None:
    adapter = await open_state(postgres_url, schema_name, claim)
    try:
        job_id = await _running(adapter)
        async with adapter.transaction() as holder:
            held = await holder.job_get(JobGet(job_id=job_id, lock=True))
            assert held is not None
            async with adapter.transaction() as tx:
                cancelled = await asyncio.wait_for(
                    tx.chains_cancel(ChainsCancel(chain_ids=[job_id], now=NOW)), 10
                )
            assert cancelled.running_job_ids == [job_id]
            with pytest.raises(JobCancelledError):
                await holder.job_complete(
                    JobComplete(job_id=job_id, worker_id="w", lease_generation=held.lease_generation, now=NOW)
                )
        async with adapter.transaction(read_only=True) as tx:
            stored = await tx.job_get(JobGet(job_id=job_id))
        assert stored is not None
        assert stored.status is JobStatus.CANCELLED
    finally:
        await adapter.close()


@pytest.fixture
async def seeded(pg_state: PostgresStateAdapter) -> PostgresStateAdapter:
    blockers = [_new(f"type{n % 5}") for n in range(100)]
    dependents = [_new("dep", blocker_chain_ids=[b.id]) for b in blockers]
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=blockers + dependents, now=NOW))
        await tx.connection.execute(
            sql.SQL("ANALYZE {}, {}").format(
                sql.Identifier(pg_state.options.schema, "jobchain_job"),
                sql.Identifier(pg_state.options.schema, "jobchain_job_blocker"),
            )
        )
    return pg_state


async def test_propagation_follows_the_blocker_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await plan(seeded, q.jobs_propagate, {"now": NOW, "kept": 10})
    assert "jobchain_job_blocker_chain_idx" in text


async def test_retry_follows_dependents_through_the_blocker_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {"job_ids": [new_id()], "scheduled_at": None, "delay": None, "refuse": False, "now": NOW}
    assert "jobchain_job_blocker_chain_idx" in await plan(seeded, q.jobs_retry, params)


async def test_cancel_reads_each_chains_last_job_off_the_chain_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    chain_ids = [new_id()]
    params = {"chain_ids": chain_ids, "named": chain_ids, "reason": None, "refuse": False, "now": NOW}
    assert "jobchain_job_chain_index_idx" in await plan(seeded, q.chains_cancel, params)


async def test_a_cascading_cancel_walks_blockers_through_the_indexes(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await plan(seeded, q.chains_cancel_cascade, {"chain_ids": [new_id()]})
    assert "jobchain_job_chain_index_idx" in text
    assert "jobchain_job_blocker_chain_idx" in text


async def test_prune_scans_old_finished_jobs_through_the_status_index(seeded: PostgresStateAdapter) -> None:
    # A live queue: most jobs open, some finished in each terminal status.
    async with seeded.transaction() as tx:
        page = await tx.jobs_list(JobsList(type_names=["type1", "type2", "type3"], limit=60))
        ids = [job.id for job in page.items]
        for job_id in ids[:20]:
            await tx.job_complete(JobComplete(job_id=job_id, now=NOW))
        for job_id in ids[20:30]:
            await tx.job_fail(JobFail(job_id=job_id, error="e", now=NOW))
        await tx.chains_cancel(ChainsCancel(chain_ids=ids[30:40], now=NOW))
        await tx.connection.execute(
            sql.SQL("ANALYZE {}").format(sql.Identifier(seeded.options.schema, "jobchain_job"))
        )
    q = Queries(seeded.options.schema, "jobchain_")
    params = PRUNE_ALL_FINISHED
    assert "jobchain_job_listing_status_idx" in await plan(seeded, q.chains_prune, params)


def _rows_read(node: dict[str, Any], table: str) -> int:
    """Rows the scans of ``table`` in a plan tree returned (EXPLAIN ANALYZE, FORMAT JSON)."""
    scan = node.get("Relation Name") == table and "Scan" in node["Node Type"]
    own = node["Actual Rows"] * node["Actual Loops"] if scan else 0
    return own + sum(_rows_read(child, table) for child in node.get("Plans", []))


async def test_a_prune_batch_reads_about_its_limit_however_many_chains_are_old_enough(
    pg_state: PostgresStateAdapter,
) -> None:
    # Retention switched on over a long history (or fallen behind): 1,000 chains qualify. Each
    # batch reading all of them made catching up quadratic (the soak of 2026-11-27).
    old = [_new("history") for _ in range(1000)] + [_new("other") for _ in range(20)]
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=old, now=NOW))
        for n, job in enumerate(old):
            await tx.job_complete(JobComplete(job_id=job.id, now=NOW + timedelta(milliseconds=n)))
        await tx.connection.execute(
            sql.SQL("ANALYZE {}").format(sql.Identifier(pg_state.options.schema, "jobchain_job"))
        )
    q = Queries(pg_state.options.schema, "jobchain_")
    params = PRUNE_ALL_FINISHED
    async with pg_state.transaction() as tx:
        cursor = tx.connection.cursor()
        await cursor.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + q.chains_prune, params, prepare=False)
        row = await cursor.fetchone()
    assert row is not None
    tree = row[0][0]["Plan"]
    # Each type's range is read in order up to the limit, never every qualifying job: what the
    # scans of the job table return stays a small multiple of the limit (10), not 1,000.
    read = _rows_read(tree, "jobchain_job")
    assert 10 <= read <= 100
    async with pg_state.transaction(read_only=True) as tx:
        kept = [await tx.job_get(JobGet(job_id=job.id)) is not None for job in old[:11]]
    # The ten oldest went (the first ten history chains, finished first).
    assert kept == [False] * 10 + [True]


async def test_a_dead_letter_retried_while_a_prune_waits_for_it_is_kept(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    # The prune reads the chain as failed long ago, then waits for the retry's row lock. Once
    # the retry commits, the chain is pending again: deleting it would lose a job whose retry
    # was reported done.
    kept, retried = _new(), _new()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[kept, retried], now=NOW))
        for job in (kept, retried):
            await tx.job_fail(JobFail(job_id=job.id, error="e", now=NOW))
    other = await open_state(postgres_url, schema_name, "skip-locked")
    pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def prune() -> Any:
        async with pg_state.transaction() as tx:
            pid.set_result(tx.connection.info.backend_pid)
            return await tx.chains_prune(ChainsPrune(failed_before=NOW + timedelta(days=1), limit=10))

    try:
        async with other.transaction() as tx:
            retry = await tx.jobs_retry(JobsRetry(job_ids=[retried.id], now=NOW))
            assert [job.id for job in retry.retried] == [retried.id]
            pruning = asyncio.create_task(prune())
            await until_lock_wait(postgres_url, await pid, pruning, "the prune did not wait for the retry")
        pruned = await asyncio.wait_for(pruning, 30)
    finally:
        await other.close()
    async with pg_state.transaction(read_only=True) as tx:
        after = await tx.job_get(JobGet(job_id=retried.id))
    assert after is not None
    assert after.status is JobStatus.PENDING
    assert [chain.id for chain in pruned.chains] == [kept.id]


async def test_an_id_that_is_no_uuid_refuses_a_whole_cancel_or_retry(pg_state: PostgresStateAdapter) -> None:
    open_job, failed_job = _new(), _new()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[open_job, failed_job], now=NOW))
        await tx.job_fail(JobFail(job_id=failed_job.id, error="e", now=NOW))
    async with pg_state.transaction() as tx:
        cancelled = await tx.chains_cancel(
            ChainsCancel(chain_ids=["nope", open_job.id, failed_job.id], now=NOW)
        )
        retried = await tx.jobs_retry(JobsRetry(job_ids=[failed_job.id, "nope"], now=NOW))
    async with pg_state.transaction(read_only=True) as tx:
        statuses = [(await tx.job_get(JobGet(job_id=j.id))) for j in (open_job, failed_job)]
    assert (cancelled.cancelled, cancelled.not_found) == ([], ["nope"])
    assert cancelled.not_cancellable == [(failed_job.id, "failed")]
    assert (retried.retried, retried.not_found) == ([], ["nope"])
    assert [job.status for job in statuses if job is not None] == [JobStatus.PENDING, JobStatus.FAILED]


async def test_jobs_of_a_batch_blocked_by_a_chain_it_creates_failed_follow_that_chain(
    pg_state: PostgresStateAdapter,
) -> None:
    failed = _new("failed")
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[failed], now=NOW))
        await tx.job_fail(JobFail(job_id=failed.id, error="e", now=NOW))
    first = _new("first", blocker_chain_ids=[failed.id])
    second = _new("second", blocker_chain_ids=[first.id])
    opted = _new("opted", blocker_chain_ids=[first.id], runs_after_failed_blockers=True)
    async with pg_state.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=[first, second, opted], now=NOW))
    async with pg_state.transaction(read_only=True) as tx:
        stored = [await tx.job_get(JobGet(job_id=job.id)) for job in (first, second, opted)]
    assert [c.job for c in created] == stored
    assert [c.job.status for c in created] == [JobStatus.FAILED, JobStatus.FAILED, JobStatus.PENDING]
    assert [c.job.failed_by_chain_id for c in created] == [failed.id, first.id, None]
    assert created[1].job.last_attempt_error == f"blocker chain {first.id} (first) failed"
    assert [c.incomplete_blocker_chain_ids for c in created] == [(), (), ()]


async def test_a_retried_blocker_counts_again_for_an_opted_in_job_still_waiting(
    pg_state: PostgresStateAdapter,
) -> None:
    first, second = _new("first"), _new("second")
    waiting = _new("waiting", blocker_chain_ids=[first.id, second.id], runs_after_failed_blockers=True)
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[first, second, waiting], now=NOW))
        await tx.job_fail(JobFail(job_id=first.id, error="e", now=NOW))
        await tx.jobs_retry(JobsRetry(job_ids=[first.id], now=NOW))
        done = await tx.job_complete(JobComplete(job_id=first.id, now=NOW))
        assert done.unblocked_jobs == []  # second still runs
        done = await tx.job_complete(JobComplete(job_id=second.id, now=NOW))
    assert [job.id for job in done.unblocked_jobs] == [waiting.id]
