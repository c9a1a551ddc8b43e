"""Deduplicating jobs_create on a table that was never analyzed (a fresh schema, a bulk load).

Before the fix the deduplication lookup ran once per leader *per leader* and walked every root
of the chain type: 100 new keys on a table of 2 000 keyed roots took about a minute, and this
module's batch ran into the test timeout. Nothing here measures time; the cases assert
the plan (EXPLAIN) and that a large batch deduplicates exactly as specified.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from jobchain.contracts import JobsCreate, NewJob
from jobchain.entities import Deduplication, new_id
from jobchain_postgres import PostgresStateAdapter
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import new_jobs_document

from .conftest import open_state

NOW = datetime(2030, 1, 1, tzinfo=UTC)
WINDOW = timedelta(hours=1)
BATCH = 500
KEYS = 250  # every key twice in the batch: the second item collapses onto the first
FILLER = 2000  # keyed roots of the same chain type that match nothing


def keyed(key: str, type_name: str = "t") -> NewJob:
    return NewJob(
        id=new_id(),
        type_name=type_name,
        chain_type_name=type_name,
        deduplication=Deduplication(key=key, scope="any", window=WINDOW),
    )


@pytest.fixture
async def fresh(postgres_url: str, schema_name: str) -> AsyncIterator[PostgresStateAdapter]:
    """A migrated schema that has never been analyzed (autovacuum off for its job table)."""
    adapter = await open_state(postgres_url, schema_name)
    async with adapter.transaction() as tx:
        await tx.connection.execute(
            sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                sql.Identifier(schema_name, "jobchain_job")
            )
        )
    yield adapter
    await adapter.close()


async def never_analyzed(adapter: PostgresStateAdapter) -> bool:
    async with adapter.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            "SELECT analyze_count + autoanalyze_count = 0 FROM pg_stat_user_tables"
            " WHERE schemaname = %s AND relname = 'jobchain_job'",
            [adapter.options.schema],
        )
        row = await cursor.fetchone()
    return row is not None and bool(row[0])


def matches_section(plan: str) -> str:
    """The lines of an EXPLAIN text that plan the ``matches`` CTE (up to the next CTE)."""
    lines = plan.splitlines()
    starts = [n for n, line in enumerate(lines) if line.strip() == "CTE matches"]
    assert starts, f"matches is not planned on its own (inlined, it runs once per leader):\n{plan}"
    start = starts[0]
    end = next((n for n in range(start + 1, len(lines)) if re.fullmatch(r"\s*CTE \w+", lines[n])), len(lines))
    return "\n".join(lines[start:end])


async def test_lookup_walks_the_deduplication_index_without_statistics(fresh: PostgresStateAdapter) -> None:
    async with fresh.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[keyed(f"k{n}") for n in range(20)], now=NOW))
    assert await never_analyzed(fresh)
    query = Queries(fresh.options.schema, "jobchain_").jobs_create
    document = new_jobs_document([keyed(f"k{n}") for n in range(BATCH)])
    async with fresh.transaction() as tx:
        cursor = tx.connection.cursor()
        await cursor.execute(b"EXPLAIN " + query, {"jobs": document, "now": NOW}, prepare=False)
        plan = "\n".join(row[0] for row in await cursor.fetchall())
    section = matches_section(plan)
    assert "jobchain_job_deduplication_idx" in section, section
    assert "listing" not in section, section  # no walk over all roots of a type or of all time
    assert "Seq Scan on jobchain_job" not in section, section


async def test_large_batch_on_an_unanalyzed_table_deduplicates_in_and_across_batches(
    fresh: PostgresStateAdapter,
) -> None:
    async with fresh.transaction() as tx:
        filler = await tx.jobs_create(
            JobsCreate(jobs=[keyed(f"other{n}") for n in range(FILLER)], now=NOW - timedelta(minutes=5))
        )
    assert not any(created.deduplicated for created in filler)

    first_batch = [keyed(f"k{n % KEYS}") for n in range(BATCH)]
    async with fresh.transaction() as tx:
        first = await tx.jobs_create(JobsCreate(jobs=first_batch, now=NOW))
    # Item n and item n + KEYS share a key: the first inserts, the second collapses onto it.
    assert [created.deduplicated for created in first] == [False] * KEYS + [True] * KEYS
    leaders = {f"k{n}": first[n].job.id for n in range(KEYS)}
    assert [created.job.id for created in first] == [leaders[f"k{n % KEYS}"] for n in range(BATCH)]
    assert [first[n].job.id for n in range(KEYS)] == [first_batch[n].id for n in range(KEYS)]

    second_batch = [keyed(f"k{n % KEYS}") for n in range(BATCH)] + [keyed("new")]
    async with fresh.transaction() as tx:
        second = await tx.jobs_create(JobsCreate(jobs=second_batch, now=NOW + timedelta(minutes=1)))
    assert all(created.deduplicated for created in second[:BATCH])
    assert [created.job.id for created in second[:BATCH]] == [leaders[f"k{n % KEYS}"] for n in range(BATCH)]
    assert (second[-1].deduplicated, second[-1].job.id) == (False, second_batch[-1].id)

    # Outside the window the same keys start new chains.
    late = NOW + WINDOW + timedelta(minutes=1)
    async with fresh.transaction() as tx:
        third = await tx.jobs_create(JobsCreate(jobs=[keyed(f"k{n}") for n in range(KEYS)], now=late))
    assert not any(created.deduplicated for created in third)

    async with fresh.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(fresh.options.schema, "jobchain_job"))
        )
        row = await cursor.fetchone()
    assert row is not None
    assert row[0] == FILLER + KEYS + 1 + KEYS
    assert await never_analyzed(fresh)
