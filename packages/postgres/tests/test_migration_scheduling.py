"""Migration 0008 (scheduling controls): a schema used by the 0007 version upgrades with its jobs
and blockers, without rewriting either table; its jobs read with priority 0 and no ordering key,
the priority index starts empty, and the claim, pause and limits work on the upgraded schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from jobchain.contracts import JobComplete, JobGet, JobsAcquire, JobsCreate, JobsList, NewJob
from jobchain.contracts.scheduling import TypesPause
from jobchain.entities import JobStatus, TypeLimits, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import Queries, migration, migration_names

from .conftest import conninfo
from .test_migrations import ledger

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def _schema_at_0007(url: str, schema: str) -> dict[str, str]:
    """A schema migrated by the 0007 version holding a pending, a running, a completed and a
    blocked job (blocked by the running job's chain), as that version wrote them."""
    queries = Queries(schema, "jobchain_")
    ids = {name: new_id() for name in ("pending", "running", "completed", "blocked")}
    job = sql.Identifier(schema, "jobchain_job")
    with psycopg.connect(conninfo(url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in migration_names():
            if name >= "0008":
                break
            connection.execute(migration(name, schema, "jobchain_"))
            connection.execute(queries.migration_record, {"name": name})
        insert = sql.SQL(
            "INSERT INTO {} (id, chain_id, type_name, chain_type_name, chain_index, status, created_at,"
            " scheduled_at, attempt, leased_by, leased_until, lease_generation, completed_at,"
            " open_blocker_count)"
            " VALUES (%(id)s, %(id)s, 't', 't', 0, %(status)s, %(at)s, %(at)s, %(attempt)s, %(by)s,"
            " %(until)s, %(attempt)s, %(done)s, %(open)s)"
        ).format(job)
        rows = [
            ("pending", 0, None, None, None, 0),
            ("running", 1, "w1", NOW + LEASE, None, 0),
            ("completed", 1, None, None, NOW, 0),
            ("blocked", 0, None, None, None, 1),
        ]
        for status, attempt, by, until, done, open_count in rows:
            connection.execute(
                insert,
                {
                    "id": ids[status],
                    "status": status,
                    "at": NOW - timedelta(seconds=10),
                    "attempt": attempt,
                    "by": by,
                    "until": until,
                    "done": done,
                    "open": open_count,
                },
            )
        connection.execute(
            sql.SQL(
                'INSERT INTO {} (job_id, blocked_by_chain_id, "index") VALUES (%(job)s, %(chain)s, 0)'
            ).format(sql.Identifier(schema, "jobchain_job_blocker")),
            {"job": ids["blocked"], "chain": ids["running"]},
        )
    return ids


def _filenodes(url: str, schema: str) -> tuple[int, int]:
    """The job and job_blocker tables' storage files: a rewrite gives a table a new one."""
    with psycopg.connect(conninfo(url), autocommit=True) as connection:
        row = connection.execute(
            "SELECT pg_relation_filenode(%s::regclass), pg_relation_filenode(%s::regclass)",
            (f'"{schema}".jobchain_job', f'"{schema}".jobchain_job_blocker'),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_a_schema_at_0007_upgrades_without_a_rewrite_and_its_jobs_take_the_controls(
    postgres_url: str, schema_name: str
) -> None:
    ids = _schema_at_0007(postgres_url, schema_name)
    before = _filenodes(postgres_url, schema_name)
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        await adapter.migrate()
        assert _filenodes(postgres_url, schema_name) == before  # catalog-only columns
        async with adapter.transaction() as tx:
            jobs = {job.id: job for job in (await tx.jobs_list(JobsList())).items}
            assert {(job.priority, job.ordering_key) for job in jobs.values()} == {(0, None)}
            assert jobs[ids["blocked"]].status is JobStatus.BLOCKED
            cursor = await tx.connection.execute(
                sql.SQL(
                    "SELECT (SELECT count(*) FROM {job} WHERE status = 'pending' AND priority <> 0),"
                    " (SELECT bool_or(resolves_on_any_end) FROM {blocker})"
                ).format(
                    job=sql.Identifier(schema_name, "jobchain_job"),
                    blocker=sql.Identifier(schema_name, "jobchain_job_blocker"),
                )
            )
            assert await cursor.fetchone() == (0, False)
            # A new job with a priority goes ahead of the old one; the old one follows.
            urgent = NewJob(id=new_id(), type_name="t", chain_type_name="t", priority=10)
            await tx.jobs_create(JobsCreate(jobs=[urgent], now=NOW))
            claimed = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=["t"],
                    worker_id="w2",
                    lease_for=LEASE,
                    limit=5,
                    now=NOW,
                    type_limits={"t": TypeLimits(max_running=3)},
                )
            )
            # max_running 3 counts the old running job: two slots.
            assert [job.id for job in claimed.jobs] == [urgent.id, ids["pending"]]
            assert claimed.held_back == ("t",)
            # The old blocker (completion only) still unblocks its job when its chain completes.
            await tx.job_complete(JobComplete(job_id=ids["running"], worker_id="w1", now=NOW))
            unblocked = await tx.job_get(JobGet(job_id=ids["blocked"]))
            assert unblocked is not None
            assert unblocked.status is JobStatus.PENDING
            await tx.types_pause(TypesPause(type_names=["t"], now=NOW))
            assert (
                await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE))
            ).jobs == []
    finally:
        await adapter.close()
    assert ledger(postgres_url, schema_name) == migration_names()
