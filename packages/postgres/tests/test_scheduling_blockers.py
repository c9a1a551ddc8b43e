"""Ordered keys on PostgreSQL: creation with a key (``jobs_ordering_lock`` + ``jobs_create``),
priorities stored by both creation statements, and what a key's previous chain does as a
blocker resolved by any end (``job_blocker.resolves_on_any_end``) through completion,
propagation, retry, deletion and pruning.

The cross-backend behaviour is the conformance suites'; these tests pin what is PostgreSQL's
own: the stored rows (ordering_key table, blocker flags), the statements sent, and the rows a
deduplicated start leaves.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from jobchain.contracts import (
    ChainsCancel,
    JobBlockersGet,
    JobComplete,
    JobFail,
    JobGet,
    JobsCreate,
    JobsRetry,
    NewJob,
)
from jobchain.entities import Deduplication, JobStatus, new_id
from jobchain_postgres import PostgresStateAdapter

from .conftest import conninfo

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def root(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


async def create(state: PostgresStateAdapter, *jobs: NewJob) -> list[Any]:
    async with state.transaction() as tx:
        return await tx.jobs_create(JobsCreate(jobs=list(jobs), now=NOW))


async def key_rows(url: str, schema: str) -> dict[str, tuple[str, str | None]]:
    """The ordering_key table: key -> (last chain, previous chain)."""
    query = sql.SQL("SELECT key, last_chain_id::text, previous_chain_id::text FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier("jobchain_ordering_key")
    )
    async with await psycopg.AsyncConnection.connect(conninfo(url)) as connection:
        rows = await (await connection.execute(query)).fetchall()
    return {key: (last, previous) for key, last, previous in rows}


async def blocker_flags(url: str, schema: str, job_id: str) -> list[tuple[str, int, bool]]:
    query = sql.SQL(
        'SELECT blocked_by_chain_id::text, "index", resolves_on_any_end FROM {}.{} '
        'WHERE job_id = %s ORDER BY "index"'
    ).format(sql.Identifier(schema), sql.Identifier("jobchain_job_blocker"))
    async with await psycopg.AsyncConnection.connect(conninfo(url)) as connection:
        return list(await (await connection.execute(query, (job_id,))).fetchall())


async def run_to_end(state: PostgresStateAdapter, job_id: str, *, fail: bool = False) -> Any:
    """Complete or fail ``job_id`` without a worker (no claim: these tests are about blockers)."""
    async with state.transaction() as tx:
        if fail:
            return await tx.job_fail(JobFail(job_id=job_id, error="boom", now=NOW))
        return await tx.job_complete(JobComplete(job_id=job_id, output=1, now=NOW))


async def test_first_chain_of_a_key_runs_and_the_next_waits_for_it(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    first, second = root(ordering_key="k"), root(ordering_key="k")
    [a] = await create(pg_state, first)
    assert a.job.status is JobStatus.PENDING
    assert a.ordered_after is None
    assert a.job.ordering_key == "k"
    assert a.incomplete_blocker_chain_ids == ()
    [b] = await create(pg_state, second)
    assert b.job.status is JobStatus.BLOCKED
    assert b.ordered_after == first.id
    assert b.incomplete_blocker_chain_ids == (first.id,)
    assert await key_rows(postgres_url, schema_name) == {"k": (second.id, first.id)}
    assert await blocker_flags(postgres_url, schema_name, second.id) == [(first.id, 0, True)]
    completed = await run_to_end(pg_state, first.id)
    assert [j.id for j in completed.unblocked_jobs] == [second.id]


async def test_the_previous_chain_comes_after_the_declared_blockers(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    other, first = root("o"), root(ordering_key="k")
    await create(pg_state, other, first)
    second = root(ordering_key="k", blocker_chain_ids=[other.id])
    [b] = await create(pg_state, second)
    assert b.incomplete_blocker_chain_ids == (other.id, first.id)
    assert await blocker_flags(postgres_url, schema_name, second.id) == [
        (other.id, 0, False),
        (first.id, 1, True),
    ]
    async with pg_state.transaction(read_only=True) as tx:
        chains = await tx.job_blockers_get(JobBlockersGet(job_id=second.id))
    assert [c.id for c in chains] == [other.id, first.id]


async def test_a_batch_orders_its_own_roots_of_a_key(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    old = root(ordering_key="k")
    await create(pg_state, old)
    one, free, two, other_key = (
        root(ordering_key="k"),
        root(),
        root(ordering_key="k"),
        root(ordering_key="other"),
    )
    created = await create(pg_state, one, free, two, other_key)
    assert [c.ordered_after for c in created] == [old.id, None, one.id, None]
    assert [c.job.status for c in created] == [
        JobStatus.BLOCKED,
        JobStatus.PENDING,
        JobStatus.BLOCKED,
        JobStatus.PENDING,
    ]
    assert await key_rows(postgres_url, schema_name) == {
        "k": (two.id, one.id),
        "other": (other_key.id, None),
    }


async def test_a_terminal_previous_chain_blocks_nothing_whatever_its_end(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    first = root(ordering_key="k")
    await create(pg_state, first)
    await run_to_end(pg_state, first.id, fail=True)
    second = root(ordering_key="k")
    [b] = await create(pg_state, second)
    # A failed predecessor neither blocks nor fails the next chain of the key.
    assert b.job.status is JobStatus.PENDING
    assert b.ordered_after == first.id
    assert b.incomplete_blocker_chain_ids == ()
    assert await blocker_flags(postgres_url, schema_name, second.id) == [(first.id, 0, True)]


async def test_a_deduplicated_start_takes_no_place_in_the_order(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    dedup = Deduplication(key="d")
    first = root(ordering_key="k", deduplication=dedup)
    await create(pg_state, first)
    again = root(ordering_key="k", deduplication=dedup)
    [d] = await create(pg_state, again)
    assert d.deduplicated
    assert d.job.id == first.id
    assert d.ordered_after is None
    assert await key_rows(postgres_url, schema_name) == {"k": (first.id, None)}
    # A key whose only start deduplicated gets no row at all.
    fresh = root(ordering_key="fresh", deduplication=dedup)
    [f] = await create(pg_state, fresh)
    assert f.deduplicated
    assert set(await key_rows(postgres_url, schema_name)) == {"k"}


async def test_priorities_are_stored_by_both_creation_statements(pg_state: PostgresStateAdapter) -> None:
    plain, keyed, blocked = root(priority=7), root(priority=-3, ordering_key="k"), root(priority=0)
    created = await create(pg_state, plain)
    created += await create(pg_state, keyed, blocked)
    async with pg_state.transaction(read_only=True) as tx:
        stored = [await tx.job_get(JobGet(job_id=j.id)) for j in (plain, keyed, blocked)]
    assert [c.job.priority for c in created] == [7, -3, 0]
    assert [s.priority if s else None for s in stored] == [7, -3, 0]
    assert [s.ordering_key if s else None for s in stored] == [None, "k", None]
    assert [c.job for c in created] == stored


async def test_a_failed_or_cancelled_previous_chain_releases_the_next_one(
    pg_state: PostgresStateAdapter,
) -> None:
    first, second, third = root(ordering_key="k"), root(ordering_key="k"), root(ordering_key="k")
    await create(pg_state, first, second, third)
    failed = await run_to_end(pg_state, first.id, fail=True)
    assert failed.failed_jobs == []
    assert [j.id for j in failed.unblocked_jobs] == [second.id]
    async with pg_state.transaction() as tx:
        cancelled = await tx.chains_cancel(ChainsCancel(chain_ids=[second.id], now=NOW))
    assert cancelled.failed_jobs == []
    assert [j.id for j in cancelled.unblocked_jobs] == [third.id]
    assert cancelled.unblocked_jobs[0].status is JobStatus.PENDING


async def test_the_previous_chain_ending_badly_counts_once_among_other_open_blockers(
    pg_state: PostgresStateAdapter,
) -> None:
    declared, first = root("d"), root(ordering_key="k")
    await create(pg_state, declared, first)
    second = root(ordering_key="k", blocker_chain_ids=[declared.id])
    await create(pg_state, second)
    failed = await run_to_end(pg_state, first.id, fail=True)
    assert failed.unblocked_jobs == []
    assert failed.failed_jobs == []
    completed = await run_to_end(pg_state, declared.id)
    assert [j.id for j in completed.unblocked_jobs] == [second.id]


async def test_a_declared_blocker_failing_fails_the_job_even_with_an_open_previous_chain(
    pg_state: PostgresStateAdapter,
) -> None:
    declared, first = root("d"), root(ordering_key="k")
    await create(pg_state, declared, first)
    second = root(ordering_key="k", blocker_chain_ids=[declared.id])
    await create(pg_state, second)
    failed = await run_to_end(pg_state, declared.id, fail=True)
    assert [(j.id, j.failed_by_chain_id) for j in failed.failed_jobs] == [(second.id, declared.id)]
    # The failed chain of the key is terminal: it releases nothing when its predecessor ends.
    completed = await run_to_end(pg_state, first.id)
    assert completed.unblocked_jobs == []


async def test_retrying_a_previous_chain_holds_the_next_one_again(pg_state: PostgresStateAdapter) -> None:
    declared, first = root("d"), root(ordering_key="k")
    await create(pg_state, declared, first)
    second = root(ordering_key="k", blocker_chain_ids=[declared.id])
    await create(pg_state, second)
    await run_to_end(pg_state, first.id, fail=True)  # counted as resolved: one blocker left
    async with pg_state.transaction() as tx:
        retried = await tx.jobs_retry(JobsRetry(job_ids=[first.id], now=NOW))
    assert [j.id for j in retried.retried] == [first.id]
    completed = await run_to_end(pg_state, declared.id)
    assert completed.unblocked_jobs == []  # the retried previous chain is open again
    completed = await run_to_end(pg_state, first.id)
    assert [j.id for j in completed.unblocked_jobs] == [second.id]


async def test_a_failed_previous_chain_never_refuses_a_retry(pg_state: PostgresStateAdapter) -> None:
    declared, first = root("d"), root(ordering_key="k")
    await create(pg_state, declared, first)
    second = root(ordering_key="k", blocker_chain_ids=[declared.id])
    await create(pg_state, second)
    await run_to_end(pg_state, declared.id, fail=True)  # fails second
    await run_to_end(pg_state, first.id, fail=True)
    async with pg_state.transaction() as tx:
        retried = await tx.jobs_retry(JobsRetry(job_ids=[declared.id], now=NOW))
    # second follows its declared blocker back; its failed previous chain keeps it from nothing.
    assert [(j.id, j.status) for j in retried.reblocked] == [(second.id, JobStatus.BLOCKED)]
    completed = await run_to_end(pg_state, declared.id)
    assert [j.id for j in completed.unblocked_jobs] == [second.id]


async def test_a_keyed_root_created_failed_releases_the_next_root_of_its_batch(
    pg_state: PostgresStateAdapter,
) -> None:
    broken = root("b")
    await create(pg_state, broken)
    await run_to_end(pg_state, broken.id, fail=True)
    first = root(ordering_key="k", blocker_chain_ids=[broken.id])
    second = root(ordering_key="k")
    created = await create(pg_state, first, second)
    assert [c.job.status for c in created] == [JobStatus.FAILED, JobStatus.PENDING]
    assert [c.ordered_after for c in created] == [None, first.id]
    assert created[1].incomplete_blocker_chain_ids == ()
    async with pg_state.transaction(read_only=True) as tx:
        assert await tx.job_get(JobGet(job_id=second.id)) == created[1].job


async def test_a_group_commit_releases_the_next_chain_of_each_key(pg_state: PostgresStateAdapter) -> None:
    firsts = [root(ordering_key=key) for key in ("a", "b")]
    nexts = [root(ordering_key=key) for key in ("a", "b")]
    await create(pg_state, *firsts, *nexts)
    async with pg_state.transaction() as tx:
        results = await tx.jobs_complete([JobComplete(job_id=j.id, output=1, now=NOW) for j in firsts])
    released = [[j.id for j in r.unblocked_jobs] for r in results if not isinstance(r, Exception)]
    assert released == [[nexts[0].id], [nexts[1].id]]
