"""Migration 0006 (job lifecycle): a schema used by the 0005 version upgrades with its jobs, which
read back with the lifecycle defaults and then take the new statuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from jobchain.contracts import JobsList
from jobchain.entities import JobStatus, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import Queries, migration, migration_names

from .conftest import conninfo
from .test_migrations import catalog, ledger

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _schema_at_0005(url: str, schema: str) -> dict[str, str]:
    """A schema migrated by the 0005 version, holding a pending, a running, a completed and a
    blocked job (blocked by the running job's chain), as that version wrote them."""
    queries = Queries(schema, "jobchain_")
    ids = {name: new_id() for name in ("pending", "running", "completed", "blocked")}
    job = sql.Identifier(schema, "jobchain_job")
    blocker = sql.Identifier(schema, "jobchain_job_blocker")
    with psycopg.connect(conninfo(url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in migration_names():
            if name >= "0006":
                break
            connection.execute(migration(name, schema, "jobchain_"))
            connection.execute(queries.migration_record, {"name": name})
        insert = sql.SQL(
            "INSERT INTO {} (id, chain_id, type_name, chain_type_name, chain_index, status, created_at,"
            " scheduled_at, attempt, leased_by, leased_until, lease_generation, completed_at,"
            " open_blocker_count, last_attempt_error)"
            " VALUES (%(id)s, %(id)s, 't', 't', 0, %(status)s, %(at)s, %(at)s, %(attempt)s, %(by)s,"
            " %(until)s, %(gen)s, %(done)s, %(open)s, %(error)s)"
        ).format(job)
        rows = [
            ("pending", 2, None, None, None, 0, "boom"),
            ("running", 3, "w1", NOW + timedelta(seconds=30), None, 0, None),
            ("completed", 1, None, None, NOW, 0, None),
            ("blocked", 0, None, None, None, 1, None),
        ]
        for status, attempt, by, until, done, open_count, error in rows:
            connection.execute(
                insert,
                {
                    "id": ids[status],
                    "status": status,
                    "at": NOW,
                    "attempt": attempt,
                    "by": by,
                    "until": until,
                    "gen": attempt,
                    "done": done,
                    "open": open_count,
                    "error": error,
                },
            )
        connection.execute(
            sql.SQL(
                'INSERT INTO {} (job_id, blocked_by_chain_id, "index") VALUES (%(job)s, %(chain)s, 0)'
            ).format(blocker),
            {"job": ids["blocked"], "chain": ids["running"]},
        )
    return ids


async def test_a_schema_at_0005_upgrades_and_its_jobs_read_with_the_lifecycle_defaults(
    postgres_url: str, schema_name: str
) -> None:
    ids = _schema_at_0005(postgres_url, schema_name)
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        await adapter.migrate()
        async with adapter.transaction(read_only=True) as tx:
            jobs = {job.id: job for job in (await tx.jobs_list(JobsList())).items}
        # The new values are usable at once by the next transaction (the migration committed).
        async with adapter.transaction() as tx:
            await tx.connection.execute(
                sql.SQL("UPDATE {} SET status = 'cancelled', cancelled_at = %s WHERE id = %s").format(
                    sql.Identifier(schema_name, "jobchain_job")
                ),
                [NOW, ids["pending"]],
            )
        async with adapter.transaction(read_only=True) as tx:
            cancelled = (await tx.jobs_list(JobsList(statuses=["cancelled"]))).items
    finally:
        await adapter.close()
    assert {ids[s]: jobs[ids[s]].status for s in ids} == {ids[s]: JobStatus(s) for s in ids}
    for job in jobs.values():
        assert (job.attempt_errors, job.attempt_base, job.failed_at, job.cancelled_at) == ((), 0, None, None)
        assert (job.cancel_reason, job.failed_by_chain_id, job.runs_after_failed_blockers) == (
            None,
            None,
            False,
        )
    assert jobs[ids["running"]].attempts_used == 3
    assert jobs[ids["pending"]].last_attempt_error == "boom"
    assert [(j.id, j.status, j.cancelled_at) for j in cancelled] == [
        (ids["pending"], JobStatus.CANCELLED, NOW)
    ]
    assert ledger(postgres_url, schema_name) == migration_names()


async def test_the_upgraded_schema_equals_a_fresh_one(postgres_url: str, schema_name: str) -> None:
    _schema_at_0005(postgres_url, schema_name)
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    fresh = f"{schema_name}_f"
    other = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=fresh, pool_min_size=0))
    try:
        await adapter.migrate()
        await other.migrate()
        assert catalog(postgres_url, schema_name) == catalog(postgres_url, fresh)
    finally:
        await adapter.close()
        await other.close()
        with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(fresh)))
