"""Migration 0009 (issue 21, the hot path): a database at 0008 holding every kind of row upgrades
with its rows intact and keeps working; without the self-referencing foreign key a missing chain
is still refused; and every listing and retention statement keeps an index-served plan on the
layout with fewer indexes (EXPLAIN, never timings)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import (
    ChainsDelete,
    ChainsList,
    JobComplete,
    JobFail,
    JobsAcquire,
    JobsCreate,
    JobsList,
    NewJob,
)
from jobchain.entities import JobStatus, new_id
from jobchain.errors import ChainNotFoundError
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres._identifiers import Order
from jobchain_postgres.queries import Queries, migration, migration_names

from .conftest import conninfo, open_state
from .test_lifecycle_plans import PRUNE_ALL_FINISHED
from .test_migrations import ledger
from .test_statements import until_lock_wait

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
HOT_PATH = "0009_hot_path"


def _new(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


def _step(previous_id: str, chain_id: str, index: int, type_name: str = "t") -> NewJob:
    del previous_id
    return NewJob(id=new_id(), type_name=type_name, chain_type_name="t", chain_id=chain_id, chain_index=index)


def _migrate_to(url: str, schema: str, last: str) -> None:
    queries = Queries(schema, "jobchain_")
    with psycopg.connect(conninfo(url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in migration_names():
            if name > last:
                break
            with connection.transaction():
                connection.execute(migration(name, schema, "jobchain_"))
                connection.execute(queries.migration_record, {"name": name})


def _self_foreign_keys(url: str, schema: str) -> int:
    with psycopg.connect(conninfo(url)) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = %(t)s::regclass"
            " AND confrelid = %(t)s::regclass AND contype = 'f'",
            {"t": sql.Identifier(schema, "jobchain_job").as_string(None)},
        ).fetchone()
    assert row is not None
    return int(row[0])


def _rows(url: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo(url)) as connection:
        return connection.execute(
            sql.SQL(
                "SELECT id, chain_id, chain_index, type_name, status::text, open_blocker_count,"
                " completed_at, failed_at, output FROM {} ORDER BY id"
            ).format(sql.Identifier(schema, "jobchain_job"))
        ).fetchall()


async def test_a_database_at_0008_upgrades_with_its_rows_and_keeps_working(
    postgres_url: str, schema_name: str
) -> None:
    _migrate_to(postgres_url, schema_name, "0008_scheduling")
    assert _self_foreign_keys(postgres_url, schema_name) == 1
    # Rows written by this library on the 0008 layout: roots, continuations, a blocked job, and
    # completed, failed and pending jobs.
    old = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    roots = [_new() for _ in range(6)]
    blocker = _new("blocker")
    blocked = _new("waits", blocker_chain_ids=[blocker.id])
    try:
        async with old.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[*roots, blocker, blocked], now=NOW))
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=3, now=NOW)
            )
            first, second, third = sorted(claimed.jobs, key=lambda j: j.id)
            step = _step(first.id, first.chain_id, 1)
            await tx.jobs_create(JobsCreate(jobs=[step], now=NOW))
            await tx.job_complete(JobComplete(job_id=first.id, worker_id="w", output={"n": 1}, now=NOW))
            await tx.job_complete(JobComplete(job_id=second.id, worker_id="w", output={"n": 2}, now=NOW))
            await tx.job_fail(JobFail(job_id=third.id, error="boom", worker_id="w", now=NOW))
    finally:
        await old.close()
    before = _rows(postgres_url, schema_name)

    adapter = await open_state(postgres_url, schema_name)  # applies 0009
    try:
        assert ledger(postgres_url, schema_name) == migration_names()
        assert _rows(postgres_url, schema_name) == before
        assert _self_foreign_keys(postgres_url, schema_name) == 0
        async with adapter.transaction() as tx:
            chains = (await tx.chains_list(ChainsList(limit=100))).items
            failed = (await tx.jobs_list(JobsList(statuses=[JobStatus.FAILED]))).items
            waiting = (await tx.jobs_list(JobsList(statuses=[JobStatus.BLOCKED]))).items
            typed = (await tx.chains_list(ChainsList(type_names=["blocker"]))).items
            # The continuation and the remaining roots are claimed and completed on the new layout.
            more = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w2", lease_for=LEASE, limit=10, now=NOW)
            )
            for job in more.jobs:
                await tx.job_complete(JobComplete(job_id=job.id, worker_id="w2", now=NOW))
            done = await tx.job_complete(JobComplete(job_id=blocker.id, now=NOW))
        async with adapter.transaction(read_only=True) as tx:
            pending = (await tx.jobs_list(JobsList(statuses=[JobStatus.PENDING]))).items
            completed = (await tx.jobs_list(JobsList(statuses=[JobStatus.COMPLETED], limit=100))).items
    finally:
        await adapter.close()
    assert len(chains) == 8  # 6 roots, the blocker, the blocked job; the step is no chain
    assert {c.id for c in chains} == {*(r.id for r in roots), blocker.id, blocked.id}
    assert next(c for c in chains if c.id == first.id).last.id == step.id
    assert [j.id for j in failed] == [third.id]
    assert [j.id for j in waiting] == [blocked.id]
    assert [c.id for c in typed] == [blocker.id]
    assert sorted(j.id for j in more.jobs) == sorted(
        [step.id, *(r.id for r in roots if r.id not in {first.id, second.id, third.id})]
    )
    assert [j.id for j in done.unblocked_jobs] == [blocked.id]
    assert [j.id for j in pending] == [blocked.id]
    assert len(completed) == 2 + len(more.jobs) + 1


async def test_a_continuation_of_a_missing_chain_is_refused_and_nothing_is_written(
    pg_state: PostgresStateAdapter,
) -> None:
    root = _new()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[root], now=NOW))
    missing = new_id()
    orphan = _step(root.id, missing, 1)
    with_root = _new()
    with pytest.raises(ChainNotFoundError, match=missing):
        async with pg_state.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[with_root, orphan], now=NOW))
    # A continuation must continue a root: a chain id naming a continuation is no chain.
    step = _step(root.id, root.id, 1)
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[step], now=NOW))
    with pytest.raises(ChainNotFoundError, match=step.id):
        async with pg_state.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[_step(step.id, step.id, 2)], now=NOW))
    async with pg_state.transaction(read_only=True) as tx:
        ids = {j.id for j in (await tx.jobs_list(JobsList(limit=100))).items}
    assert ids == {root.id, step.id}


async def test_a_continuation_waits_for_a_deletion_of_its_chain_in_flight_then_is_refused(
    pg_state: PostgresStateAdapter,
) -> None:
    # What the foreign key's check did: the root is read FOR KEY SHARE, so an uncommitted
    # deletion is waited for, and then the chain is missing.
    root = _new()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[root], now=NOW))
    step = _step(root.id, root.id, 1)
    async with pg_state.transaction() as deleting:
        deleted = await deleting.chains_delete(ChainsDelete(chain_ids=[root.id]))
        assert [c.id for c in deleted.chains] == [root.id]

        async def continue_it() -> None:
            async with pg_state.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[step], now=NOW))

        continuing = asyncio.create_task(continue_it())
        await asyncio.sleep(0.3)  # let it reach the lock (asserted below: it is still waiting)
        assert not continuing.done()
    with pytest.raises(ChainNotFoundError, match=root.id):
        await asyncio.wait_for(continuing, 10)
    async with pg_state.transaction(read_only=True) as tx:
        assert (await tx.jobs_list(JobsList())).items == []


async def test_a_deletion_waiting_for_a_completion_that_continues_the_chain_leaves_no_orphan(
    pg_state: PostgresStateAdapter, postgres_url: str
) -> None:
    # 0009 dropped the self-referencing foreign key that refused this deletion; chains_delete_lock
    # now makes the deletion wait for the completion and then see (and delete) its continuation.
    root = _new()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[root], now=NOW))
    step = _step(root.id, root.id, 1)
    async with pg_state.transaction() as worker:
        claimed = await worker.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, now=NOW)
        )
        await worker.jobs_create(JobsCreate(jobs=[step], now=NOW))
        await worker.job_complete(
            JobComplete(
                job_id=root.id, worker_id="w", lease_generation=claimed.jobs[0].lease_generation, now=NOW
            )
        )

        pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def delete() -> None:
            async with pg_state.transaction() as tx:
                pid.set_result(tx.connection.info.backend_pid)
                await tx.chains_delete(ChainsDelete(chain_ids=[root.id]))

        deleting = asyncio.create_task(delete())
        await until_lock_wait(
            postgres_url, await pid, deleting, "the deletion never waited for the completion"
        )
    await asyncio.wait_for(deleting, 30)
    async with pg_state.transaction(read_only=True) as tx:
        left = (await tx.jobs_list(JobsList())).items
    # The deletion saw the continuation committed while it waited: the whole chain is gone.
    assert [j for j in left if j.chain_id == root.id] == [], left


# ---------------------------------------------------------------- plans on the new layout


@pytest.fixture(scope="module")
def seeded_schema(postgres_url: str) -> Iterator[str]:
    """A schema holding the backlog, seeded once for the module: its cases only EXPLAIN."""
    name = f"jc_{uuid.uuid4().hex[:16]}"

    async def seed() -> None:
        adapter = await open_state(postgres_url, name)
        try:
            await _seed(adapter)
        finally:
            await adapter.close()

    asyncio.run(seed())
    yield name
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
async def seeded(postgres_url: str, seeded_schema: str) -> AsyncIterator[PostgresStateAdapter]:
    """The state adapter over the module's seeded backlog."""
    adapter = await open_state(postgres_url, seeded_schema)
    yield adapter
    await adapter.close()


async def _seed(pg_state: PostgresStateAdapter) -> None:
    """A backlog: many pending roots, a finished history, and a few of each rare status."""
    jobs = [_new(f"type{n % 4}") for n in range(600)]
    blocker = _new("rare")
    blocked = [_new("waits", blocker_chain_ids=[blocker.id]) for _ in range(5)]
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[*jobs, blocker, *blocked], now=NOW))
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["type0", "type1"], worker_id="w", lease_for=LEASE, limit=220, now=NOW)
        )
        finished = claimed.jobs[:200]
        # One statement each for the 200 steps and the 200 completions: the same rows as one
        # pair per job, in a fraction of the round trips (the seeding ran once per listing).
        steps = [_step(job.id, job.chain_id, 1, job.type_name) for job in finished]
        await tx.jobs_create(JobsCreate(jobs=steps, now=NOW))
        results = await tx.jobs_complete(
            [JobComplete(job_id=job.id, worker_id="w", now=NOW) for job in finished]
        )
        assert not [r for r in results if isinstance(r, Exception)], results
        for job in claimed.jobs[200:210]:
            await tx.job_fail(JobFail(job_id=job.id, error="e", worker_id="w", now=NOW))
        await tx.connection.execute(
            sql.SQL("ANALYZE {}, {}").format(
                sql.Identifier(pg_state.options.schema, "jobchain_job"),
                sql.Identifier(pg_state.options.schema, "jobchain_job_blocker"),
            )
        )


def _listing_params(**given: Any) -> dict[str, Any]:
    params: dict[str, Any] = dict.fromkeys(
        (
            "type_names",
            "chain_type_names",
            "chain_ids",
            "job_ids",
            "statuses",
            "rare_status",
            "error_types",
            "leased_by",
            "created_from",
            "created_to",
            "after_at",
            "after_id",
        ),
    )
    params.update(root_only=False, limit=51)
    params.update(given)
    return params


async def _plan(
    adapter: PostgresStateAdapter, query: bytes, params: dict[str, Any], *, merge_join: bool = True
) -> str:
    # As the other plan tests: a small table, where a sequential scan is the planner's fair
    # choice, with sequential scans priced out; what is left to see is whether an index serves.
    # merge_join=False prices out the other whole-table choice of a small table: a merge join
    # against a walk of the entire primary key (chosen or not by a few cost units, as ANALYZE's
    # sample falls).
    async with adapter.transaction(read_only=True) as tx:
        await tx.connection.execute("SET LOCAL enable_seqscan = off")
        if not merge_join:
            await tx.connection.execute("SET LOCAL enable_mergejoin = off")
        cursor = tx.connection.cursor()
        await cursor.execute(b"EXPLAIN " + query, params, prepare=False)
        return "\n".join(row[0] for row in await cursor.fetchall())


def _index_served(text: str) -> None:
    """No sequential scan of the job table, and no sort of rows no index condition selected.

    A filter on several values of an index's leading column (``type_name = ANY``) reads each
    value's range and sorts what they yield; a sort of a whole table walk would be a regression.
    """
    assert not re.search(r"Seq Scan on jobchain_job\b", text), text
    if "Sort" in text:
        assert re.search(r"Index Cond|Bitmap Index Scan", text), text


LISTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "chains-all": ("chains_list", {}),
    "chains-by-type": ("chains_list", {"type_names": ["type3"]}),
    "chains-by-rare-type": ("chains_list", {"type_names": ["rare"]}),
    "chains-by-status": ("chains_list", {"statuses": ["failed"]}),
    "chains-root-only": ("chains_list", {"root_only": True}),
    "chains-created": ("chains_list", {"created_from": NOW - timedelta(days=1), "created_to": NOW}),
    "chains-after": ("chains_list", {"after_at": NOW, "after_id": new_id()}),
    "jobs-all": ("jobs_list", {}),
    "jobs-failed": ("jobs_list", {"statuses": ["failed"], "rare_status": "failed"}),
    "jobs-blocked": ("jobs_list", {"statuses": ["blocked"], "rare_status": "blocked"}),
    "jobs-pending": ("jobs_list", {"statuses": ["pending"]}),
    "jobs-completed": ("jobs_list", {"statuses": ["completed"]}),
    "jobs-by-type": ("jobs_list", {"type_names": ["rare"]}),
    "jobs-by-chain-type": ("jobs_list", {"chain_type_names": ["type2"]}),
    "jobs-error-type": (
        "jobs_list",
        {"statuses": ["failed"], "rare_status": "failed", "error_types": ["Error"]},
    ),
    "jobs-leased-by": ("jobs_list", {"leased_by": ["w"]}),
}


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("case", sorted(LISTINGS))
async def test_every_listing_keeps_an_index_served_plan(
    seeded: PostgresStateAdapter, case: str, order: Order
) -> None:
    name, given = LISTINGS[case]
    q = Queries(seeded.options.schema, "jobchain_")
    text = await _plan(seeded, q.listing(name, order), _listing_params(**given))
    _index_served(text)
    if case == "chains-by-type":
        assert "jobchain_job_listing_type_name_idx" in text, text
    if case in ("jobs-failed", "jobs-blocked", "jobs-error-type"):
        # Dead letters: the failed jobs in listing order, not a walk of every job.
        assert "jobchain_job_listing_status_idx" in text, text
        assert "Sort" not in text, text


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_chain_and_blocked_job_listings_keep_their_indexes(
    seeded: PostgresStateAdapter, order: Order
) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    async with seeded.transaction(read_only=True) as tx:
        [blocker] = (await tx.chains_list(ChainsList(type_names=["rare"]))).items
    params = {"chain_id": blocker.id, "after_index": None, "after_at": None, "after_id": None, "limit": 51}
    chain = await _plan(seeded, q.listing("chain_jobs_list", order), params)
    _index_served(chain)
    assert "jobchain_job_chain_index_idx" in chain, chain
    blocked = await _plan(seeded, q.listing("blocked_jobs_list", order), params, merge_join=False)
    assert not re.search(r"Seq Scan on jobchain_job\b", blocked), blocked
    assert "Index Cond: (id = b.job_id)" in blocked, blocked  # each dependent by primary key


async def test_retention_reads_finished_jobs_through_indexes(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = PRUNE_ALL_FINISHED
    text = await _plan(seeded, q.chains_prune, params)
    assert not re.search(r"Seq Scan on jobchain_job\b", text), text
    assert "jobchain_job_finished_idx" in text, text  # completed, per type
    assert "jobchain_job_listing_status_idx" in text, text  # failed and cancelled
