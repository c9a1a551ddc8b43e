"""The blocker-side statements of the scheduling controls on PostgreSQL: round trips on the wire,
plans (EXPLAIN, never timings), and the ordering_key rows deletion and retention leave.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import (
    ChainsDelete,
    ChainsPrune,
    JobComplete,
    JobsAcquire,
    JobsCreate,
    NewJob,
)
from jobchain.contracts.scheduling import JobWait
from jobchain.entities import Deduplication, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import Queries

from .conftest import conninfo
from .test_migrations import plan
from .test_statements import CountingCursor, round_trips, statements

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def root(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


@pytest.fixture
async def counted(postgres_url: str, schema_name: str) -> AsyncIterator[PostgresStateAdapter]:
    connection = await psycopg.AsyncConnection.connect(
        conninfo(postgres_url), autocommit=True, cursor_factory=CountingCursor, prepare_threshold=0
    )
    adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    await adapter.migrate()
    yield adapter
    await adapter.close()
    await connection.close()


async def create(adapter: PostgresStateAdapter, *jobs: NewJob) -> None:
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=list(jobs), now=NOW))


async def test_creations_and_a_wait_take_one_round_trip_each(counted: PostgresStateAdapter) -> None:
    first = root(ordering_key="k")
    plain = await statements(counted, lambda tx: tx.jobs_create(JobsCreate(jobs=[root(), root()], now=NOW)))
    # No job of the batch has a key: the plain path, one statement, nothing more.
    assert round_trips(plain) == [["jobs_create_roots"]]
    keyed = await statements(counted, lambda tx: tx.jobs_create(JobsCreate(jobs=[first], now=NOW)))
    assert round_trips(keyed) == [["jobs_ordering_lock", "jobs_create"]]
    both = root(ordering_key="k", deduplication=Deduplication(key="d"))
    sent = await statements(counted, lambda tx: tx.jobs_create(JobsCreate(jobs=[both], now=NOW)))
    # Both locks and the decision in one pipeline (round_trips splits at each *_lock statement).
    assert [line.split(":")[0].removeprefix("-- ") for line in sent] == [
        "jobs_deduplication_lock",
        "jobs_ordering_lock",
        "jobs_create",
    ]
    assert CountingCursor.pipelined == [True, True, True]

    child, job = root("child"), root("w")
    await create(counted, child, job)
    async with counted.transaction() as tx:
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["w"], worker_id="w", lease_for=LEASE, now=NOW)
        )
    [running] = claimed.jobs
    wait = JobWait(
        job_id=job.id,
        worker_id="w",
        blocker_chain_ids=[child.id],
        lease_generation=running.lease_generation,
        now=NOW,
    )
    sent = await statements(counted, lambda tx: tx.job_wait(wait))
    assert round_trips(sent) == [["job_fail_lock", "job_wait", "jobs_propagate"]]


@pytest.fixture
async def seeded(pg_state: PostgresStateAdapter) -> PostgresStateAdapter:
    """Keyed chains (several per key), blockers and waits, analyzed, as on a live queue."""
    jobs = [root(f"type{n % 5}", ordering_key=f"key{n % 40}") for n in range(200)]
    jobs += [root("dep", blocker_chain_ids=[j.id]) for j in jobs[:50]]
    await create(pg_state, *jobs)
    schema = pg_state.options.schema
    async with pg_state.transaction() as tx:
        for table in ("jobchain_job", "jobchain_job_blocker", "jobchain_ordering_key"):
            await tx.connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))
    return pg_state


async def test_a_keyed_creation_reads_the_key_row_and_the_previous_root_by_primary_key(
    seeded: PostgresStateAdapter,
) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    lock = await plan(seeded, q.jobs_ordering_lock, {"keys": ["key1"], "chain_ids": [new_id()], "now": NOW})
    assert "jobchain_ordering_key_pkey" in lock
    item = {"ord": 0, "id": new_id(), "type_name": "t", "chain_type_name": "t", "blockers": []}
    document = json.dumps([{**item, "ordering_key": "key1"}])
    text = await plan(seeded, q.jobs_create, {"now": NOW, "jobs": document})
    assert "jobchain_ordering_key_pkey" in text
    assert "jobchain_job_chain_index_idx" in text


async def test_a_wait_reads_blockers_by_their_keys(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {
        "job_id": new_id(),
        "worker_id": "w",
        "lease_generation": None,
        "chain_ids": [new_id(), new_id()],
        "runs_after_failed": False,
        "kept": 10,
        "now": NOW,
    }
    text = await plan(seeded, q.job_wait, params)
    assert "jobchain_job_pkey" in text
    assert "jobchain_job_blocker_pkey" in text
    assert "jobchain_job_chain_index_idx" in text


async def test_deleting_a_chain_finds_its_key_row_by_primary_key(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await plan(seeded, q.chains_delete, {"chain_ids": [new_id()], "cascade": False})
    assert "jobchain_ordering_key_pkey" in text


async def lookups_plan(adapter: PostgresStateAdapter, query: bytes, params: dict[str, Any]) -> str:
    """EXPLAIN with the whole-table joins of a small table priced out, as sequential scans are.

    On the fixture's 250 jobs a hash or merge join against a walk of every root is within a few
    cost units of the lookups, and which one wins moved with the id index's correlation: ids
    are UUIDv7, random within their millisecond, so a slower (loaded) machine spreads them over
    more milliseconds, the primary key follows the heap more closely and a merge join over all
    of it came out cheapest ("Merge Semi Join" on jobchain_job_pkey, no job_chain_index_idx).
    With 10,000 roots the planner picks the lookups asserted below on its own, in id order or
    shuffled; here they are what is left once the walks are priced out.
    """
    async with adapter.transaction(read_only=True) as tx:
        for setting in ("enable_seqscan", "enable_hashjoin", "enable_mergejoin"):
            await tx.connection.execute(sql.SQL("SET LOCAL {} = off").format(sql.Identifier(setting)))
        cursor = tx.connection.cursor()
        await cursor.execute(b"EXPLAIN " + query, params, prepare=False)
        return "\n".join(row[0] for row in await cursor.fetchall())


async def test_locking_the_roots_to_delete_reads_them_by_key(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await lookups_plan(seeded, q.chains_delete_lock, {"chain_ids": [new_id()], "cascade": True})
    assert "Seq Scan on jobchain_job " not in text, text
    # The roots (given and found) by primary key, the closure's jobs by chain, their blockers by job.
    lookups = [
        r"Index Scan using jobchain_job_pkey on jobchain_job r_1\s+Index Cond: \(id = ANY ",
        r"Index Scan using jobchain_job_pkey on jobchain_job r\s+Index Cond: \(id = closure\.chain_id\)",
        r"using jobchain_job_chain_index_idx on jobchain_job j\s+Index Cond: \(chain_id = c\.chain_id\)",
        r"using jobchain_job_blocker_pkey on jobchain_job_blocker b\s+Index Cond: \(job_id = j\.id\)",
    ]
    shape = re.sub(r"  \(cost=[^)]*\)", "", text)
    for lookup in lookups:
        assert re.search(lookup, shape), f"{lookup}\n{text}"


async def key_rows(url: str, schema: str) -> dict[str, str]:
    query = sql.SQL("SELECT key, last_chain_id::text FROM {}").format(
        sql.Identifier(schema, "jobchain_ordering_key")
    )
    async with await psycopg.AsyncConnection.connect(conninfo(url)) as connection:
        return dict(await (await connection.execute(query)).fetchall())


async def test_deleting_a_keys_last_chain_deletes_its_row_and_no_other(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    first, second, other = root(ordering_key="k"), root(ordering_key="k"), root(ordering_key="o")
    await create(pg_state, first, second, other)
    async with pg_state.transaction() as tx:
        refused = await tx.chains_delete(ChainsDelete(chain_ids=[first.id]))
    # The next chain of the key is blocked by the first: deleting it alone is refused.
    assert [r.referenced_by_job_id for r in refused.blocker_references] == [second.id]
    async with pg_state.transaction() as tx:
        await tx.chains_delete(ChainsDelete(chain_ids=[second.id]))
    assert await key_rows(postgres_url, schema_name) == {"o": other.id}
    async with pg_state.transaction() as tx:
        [again] = await tx.jobs_create(JobsCreate(jobs=[root(ordering_key="k")], now=NOW))
    assert again.ordered_after is None  # the key was freed with its last chain


async def test_a_locks_prune_sweeps_orphan_key_rows_within_the_limit(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    roots = [root(ordering_key=f"k{n}") for n in range(3)]
    await create(pg_state, *roots)
    async with pg_state.transaction() as tx:
        for job in roots:
            await tx.job_complete(JobComplete(job_id=job.id, now=NOW))
    later = NOW + timedelta(seconds=1)
    async with pg_state.transaction() as tx:
        chains_only = await tx.chains_prune(ChainsPrune(completed_before=later, limit=2))
    # Without locks_before the rows stay (orphans: they free their key all the same).
    assert (len(chains_only.chains), chains_only.locks_deleted) == (2, 0)
    assert len(await key_rows(postgres_url, schema_name)) == 3
    sweep = ChainsPrune(completed_before=later, locks_before=later, limit=2)
    async with pg_state.transaction() as tx:
        first = await tx.chains_prune(sweep)
    async with pg_state.transaction() as tx:
        second = await tx.chains_prune(sweep)
    assert (len(first.chains), first.locks_deleted) == (1, 2)
    assert (second.chains, second.locks_deleted) == ([], 1)
    assert await key_rows(postgres_url, schema_name) == {}
    # Rows used since locks_before are kept, whatever their chain.
    recent = root(ordering_key="recent")
    await create(pg_state, recent)
    async with pg_state.transaction() as tx:
        await tx.chains_delete(ChainsDelete(chain_ids=[recent.id]))
        kept = await tx.chains_prune(ChainsPrune(locks_before=NOW - timedelta(seconds=1)))
    assert kept.locks_deleted == 0


async def test_pruning_finds_the_rows_naming_a_pruned_chain_through_the_blocker_index(
    seeded: PostgresStateAdapter,
) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {
        "key": "k",
        "completed_before": NOW + timedelta(days=1),
        "failed_before": None,
        "cancelled_before": None,
        "locks_before": NOW,
        "limit": 10,
    }
    text = await plan(seeded, q.chains_prune, params)
    assert "jobchain_job_blocker_chain_idx" in text
    assert "Seq Scan on jobchain_job_blocker" not in text
