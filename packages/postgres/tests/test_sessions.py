"""The adapter's own pool runs its sessions in UTC (timestamps need no conversion when read)."""

from __future__ import annotations

from datetime import UTC

from psycopg.conninfo import conninfo_to_dict

from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain_postgres import PostgresStateAdapter
from jobchain_postgres.state import utc_session


async def test_own_pool_sessions_are_utc(pg_state: PostgresStateAdapter) -> None:
    job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
    async with pg_state.transaction() as tx:
        assert tx.connection.info.parameter_status("TimeZone") == "UTC"
        await tx.jobs_create(JobsCreate(jobs=[job]))
        stored = await tx.job_get(JobGet(job_id=job.id))
    assert stored is not None
    assert stored.created_at.tzinfo is UTC
    assert stored.scheduled_at.tzinfo is UTC


def test_other_options_are_kept_and_an_explicit_time_zone_wins() -> None:
    merged = conninfo_to_dict(utc_session("host=db options='-c statement_timeout=5s'"))
    assert merged["options"] == "-c statement_timeout=5s -c TimeZone=UTC"
    assert merged["host"] == "db"
    assert conninfo_to_dict(utc_session("host=db"))["options"] == "-c TimeZone=UTC"
    explicit = "host=db options='-c timezone=Europe/Paris'"
    assert utc_session(explicit) == explicit
