"""Migration 0013 (issue 37, deliver 3: failure and cancel hooks): a database at 0012 holding
pending, running, blocked, completed, failed and cancelled jobs upgrades with every row intact
and starts no hook for the jobs that ended before it; once hooks are registered, the rule holds
for those old rows: the running job failing (and the failure propagating to the job it blocked),
the pending one cancelled, and the failed and cancelled ones retried and ending again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from jobchain.contracts import (
    ChainsCancel,
    EndHooksRegister,
    JobComplete,
    JobFail,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsRetry,
    NewJob,
    TypeEndHooks,
)
from jobchain.end_hooks import JobEnded
from jobchain.entities import Job, JobStatus, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import migration_names

from .conftest import conninfo, open_state
from .test_migration_session_revocations import _migrate_to, _rows
from .test_migrations import ledger

NOW = datetime(2030, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
LEASE = timedelta(seconds=30)
FAILED_HOOK = "ended.failed"
CANCELLED_HOOK = "ended.cancelled"


def _new(type_name: str, blocker_chain_ids: tuple[str, ...] = ()) -> NewJob:
    return NewJob(
        id=new_id(), type_name=type_name, chain_type_name=type_name, blocker_chain_ids=blocker_chain_ids
    )


def _type_hook_rows(url: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo(url)) as connection:
        table = sql.Identifier(schema, "jobchain_type_hook")
        return connection.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall()


async def _seed_at_0012(url: str, schema: str) -> dict[str, str]:
    """Jobs written by the 0012 version (no hook table, no trigger): one of each status."""
    old = await PostgresStateAdapter.open(url, StateOptions(schema=schema, pool_min_size=0))
    running, pending, failed, cancelled, completed = (
        _new("r"),
        _new("t"),
        _new("t"),
        _new("t"),
        _new("c"),
    )
    blocked = _new("d", (running.id,))
    try:
        async with old.transaction() as tx:
            await tx.jobs_create(
                JobsCreate(jobs=[running, pending, failed, cancelled, completed, blocked], now=NOW)
            )
            for type_name in ("r", "c"):
                await tx.jobs_acquire(
                    JobsAcquire(type_names=[type_name], worker_id="w", lease_for=LEASE, now=NOW)
                )
            await tx.job_complete(JobComplete(job_id=completed.id, worker_id="w", now=NOW))
            await tx.job_fail(JobFail(job_id=failed.id, error="old failure", now=NOW))
            await tx.chains_cancel(ChainsCancel(chain_ids=[cancelled.id], reason="old cancel", now=NOW))
    finally:
        await old.close()
    return {
        "running": running.id,
        "pending": pending.id,
        "failed": failed.id,
        "cancelled": cancelled.id,
        "completed": completed.id,
        "blocked": blocked.id,
    }


async def _jobs(adapter: PostgresStateAdapter, *type_names: str) -> list[Job]:
    async with adapter.transaction(read_only=True) as tx:
        return list((await tx.jobs_list(JobsList(type_names=type_names, order="asc", limit=100))).items)


def _ended(job: Job) -> JobEnded:
    return msgspec.convert(job.input, JobEnded)


async def test_a_database_at_0012_upgrades_with_its_jobs_and_then_starts_hooks(
    postgres_url: str, schema_name: str
) -> None:
    _migrate_to(postgres_url, schema_name, "0012_worker_load")
    ids = await _seed_at_0012(postgres_url, schema_name)
    before = _rows(postgres_url, schema_name)
    assert len(before["job"]) == 6

    adapter = await open_state(postgres_url, schema_name)  # applies 0013
    try:
        assert ledger(postgres_url, schema_name) == migration_names()
        assert "0013_end_hooks" in migration_names()
        # Every row intact, and no hook job for the jobs that ended before the migration.
        assert _rows(postgres_url, schema_name) == before
        assert _type_hook_rows(postgres_url, schema_name) == []
        statuses = {job.id: job.status for job in await _jobs(adapter, "r", "t", "c", "d")}
        assert statuses == {
            ids["running"]: JobStatus.RUNNING,
            ids["pending"]: JobStatus.PENDING,
            ids["failed"]: JobStatus.FAILED,
            ids["cancelled"]: JobStatus.CANCELLED,
            ids["completed"]: JobStatus.COMPLETED,
            ids["blocked"]: JobStatus.BLOCKED,
        }

        async with adapter.transaction() as tx:
            await tx.end_hooks_register(
                EndHooksRegister(
                    types=[
                        TypeEndHooks(type_name="r", on_failed=FAILED_HOOK),
                        TypeEndHooks(type_name="d", on_failed=FAILED_HOOK),
                        TypeEndHooks(type_name="t", on_failed=FAILED_HOOK, on_cancelled=CANCELLED_HOOK),
                        TypeEndHooks(type_name=FAILED_HOOK, priority=5),
                    ],
                    now=NOW,
                )
            )
        later = NOW + SECOND
        async with adapter.transaction() as tx:
            # The old running job fails as its worker; the failure propagates to the blocked job.
            await tx.job_fail(JobFail(job_id=ids["running"], error="courier lost", worker_id="w", now=later))
            await tx.chains_cancel(ChainsCancel(chain_ids=[ids["pending"]], reason="asked", now=later))
            await tx.jobs_retry(JobsRetry(job_ids=[ids["failed"], ids["cancelled"]], now=later))
        assert len(await _jobs(adapter, FAILED_HOOK, CANCELLED_HOOK)) == 3, "a retry started a hook"
        again = later + SECOND
        async with adapter.transaction() as tx:
            await tx.job_fail(JobFail(job_id=ids["failed"], error="new failure", now=again))
            await tx.chains_cancel(ChainsCancel(chain_ids=[ids["cancelled"]], reason="again", now=again))

        failed_hooks = await _jobs(adapter, FAILED_HOOK)
        assert sorted(
            (_ended(h).job_id, _ended(h).error_type, _ended(h).failed_by_chain_id) for h in failed_hooks
        ) == sorted(
            [
                (ids["running"], None, None),
                (ids["blocked"], "BlockerChainFailed", ids["running"]),
                (ids["failed"], None, None),
            ]
        )
        assert {(h.status, h.priority, h.chain_id == h.id) for h in failed_hooks} == {
            (JobStatus.PENDING, 5, True)
        }
        by_job = {_ended(h).job_id: _ended(h) for h in failed_hooks}
        assert (by_job[ids["running"]].error, by_job[ids["failed"]].error) == ("courier lost", "new failure")
        cancelled_hooks = await _jobs(adapter, CANCELLED_HOOK)
        assert sorted((_ended(h).job_id, _ended(h).reason) for h in cancelled_hooks) == sorted(
            [(ids["pending"], "asked"), (ids["cancelled"], "again")]
        )
        assert {h.priority for h in cancelled_hooks} == {0}
        # Registered hook rows: one per type given, none for the types left out.
        assert sorted(row[0] for row in _type_hook_rows(postgres_url, schema_name)) == sorted(
            ["r", "d", "t", FAILED_HOOK]
        )
    finally:
        await adapter.close()
