"""Failure and cancel hooks on PostgreSQL, beyond the suite (EndHooksTests): registration is one
statement; the trigger's WHEN keeps claims, renewals, reschedules, completions and retries from
ever calling its function; the hook input's ``error_type`` is the last history entry's (none for
an empty history) and ``at`` is UTC whatever the session's time zone; a caller's search_path
cannot redirect the function; and a table prefix's hooks stay in that prefix."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import (
    ChainsCancel,
    EndHooksRegister,
    JobComplete,
    JobFail,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsRetry,
    NewJob,
    TypeEndHooks,
)
from jobchain.end_hooks import JobEnded
from jobchain.entities import AttemptError, Job, Schedule, new_id
from jobchain.errors import InvalidArgumentError
from jobchain_postgres import PostgresStateAdapter, StateOptions

from .conftest import conninfo
from .test_statements import CountingCursor, counted, round_trips, statements  # noqa: F401 (fixture)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
HOOK = "t.ended"


def _new(type_name: str = "t") -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name)


async def _register(adapter: PostgresStateAdapter, *rows: TypeEndHooks) -> None:
    async with adapter.transaction() as tx:
        await tx.end_hooks_register(EndHooksRegister(types=rows, now=NOW))


async def _hooks(adapter: PostgresStateAdapter, hook: str = HOOK) -> list[Job]:
    async with adapter.transaction(read_only=True) as tx:
        return list((await tx.jobs_list(JobsList(type_names=[hook], order="asc"))).items)


def _ended(job: Job) -> JobEnded:
    return msgspec.convert(job.input, JobEnded)


async def _hook_function_calls(adapter: PostgresStateAdapter, connection: Any) -> int:
    """Calls of this schema's trigger function in the current transaction (track_functions)."""
    cursor = await connection.execute(
        "SELECT COALESCE(sum(calls), 0)::integer FROM pg_stat_xact_user_functions"
        " WHERE schemaname = %s AND funcname = 'jobchain_job_end_hooks'",
        [adapter.options.schema],
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_registering_hooks_sends_one_statement_and_none_for_no_types(
    counted: PostgresStateAdapter,  # noqa: F811 (the fixture)
) -> None:
    rows = [TypeEndHooks(type_name="t", on_failed=HOOK), TypeEndHooks(type_name=HOOK, priority=3)]
    sent = await statements(counted, lambda tx: tx.end_hooks_register(EndHooksRegister(types=rows, now=NOW)))
    assert round_trips(sent) == [["end_hooks_register"]]
    assert await statements(counted, lambda tx: tx.end_hooks_register(EndHooksRegister(types=[]))) == []
    CountingCursor.sent.clear()


async def test_a_type_given_twice_registers_its_last_row(pg_state: PostgresStateAdapter) -> None:
    await _register(
        pg_state, TypeEndHooks(type_name="t", on_failed="first"), TypeEndHooks(type_name="t", on_failed=HOOK)
    )
    async with pg_state.transaction() as tx:
        [job] = [c.job for c in await tx.jobs_create(JobsCreate(jobs=[_new()], now=NOW))]
        await tx.job_fail(JobFail(job_id=job.id, error="no", now=NOW))
    assert [h.type_name for h in await _hooks(pg_state)] == [HOOK]
    assert await _hooks(pg_state, "first") == []


@pytest.mark.parametrize(
    "fields",
    [
        {"type_name": "t", "priority": 101},
        {"type_name": "", "on_failed": HOOK},
        {"type_name": "t", "on_cancelled": ""},
    ],
    ids=["priority out of range", "empty type name", "empty hook name"],
)
def test_a_bad_row_is_refused_when_built(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        TypeEndHooks(**fields)


async def test_claims_renewals_reschedules_completions_and_retries_never_call_the_hook_function(
    pg_state: PostgresStateAdapter,
) -> None:
    await _register(pg_state, TypeEndHooks(type_name="t", on_failed=HOOK, on_cancelled=HOOK))
    acquire = JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, now=NOW)
    async with pg_state.transaction() as tx:
        connection = tx.connection
        await connection.execute("SET LOCAL track_functions = 'pl'")
        created = [
            c.job.id for c in await tx.jobs_create(JobsCreate(jobs=[_new() for _ in range(3)], now=NOW))
        ]
        [running] = (await tx.jobs_acquire(acquire)).jobs
        await tx.job_renew_lease(JobRenewLease(job_id=running.id, worker_id="w", lease_for=LEASE, now=NOW))
        await tx.job_reschedule(
            JobReschedule(job_id=running.id, schedule=Schedule(at=NOW), error="again", worker_id="w", now=NOW)
        )
        [running] = (await tx.jobs_acquire(acquire)).jobs
        await tx.job_complete(JobComplete(job_id=running.id, worker_id="w", now=NOW))
        assert await _hook_function_calls(pg_state, connection) == 0
        first, second = (job_id for job_id in created if job_id != running.id)
        await tx.job_fail(JobFail(job_id=first, error="no", now=NOW))
        assert await _hook_function_calls(pg_state, connection) == 1
        await tx.jobs_retry(JobsRetry(job_ids=[first], now=NOW))
        assert await _hook_function_calls(pg_state, connection) == 1
        await tx.chains_cancel(ChainsCancel(chain_ids=[second], now=NOW))
        assert await _hook_function_calls(pg_state, connection) == 2
    assert len(await _hooks(pg_state)) == 2


async def test_the_hook_input_carries_the_last_error_type_or_none(pg_state: PostgresStateAdapter) -> None:
    await _register(pg_state, TypeEndHooks(type_name="t", on_failed=HOOK))
    entry = AttemptError(attempt=1, worker_id=None, error_type="CardDeclined", message="declined", at=NOW)
    async with pg_state.transaction() as tx:
        typed, plain = (c.job for c in await tx.jobs_create(JobsCreate(jobs=[_new(), _new()], now=NOW)))
        await tx.job_fail(JobFail(job_id=typed.id, error="declined", attempt_error=entry, now=NOW))
        await tx.job_fail(JobFail(job_id=plain.id, error="gave up", now=NOW + LEASE))
    by_job = {_ended(h).job_id: _ended(h) for h in await _hooks(pg_state)}
    assert (by_job[typed.id].error_type, by_job[typed.id].error) == ("CardDeclined", "declined")
    assert (by_job[plain.id].error_type, by_job[plain.id].error) == (None, "gave up")


async def test_the_hook_input_time_is_utc_whatever_the_session_time_zone(
    pg_state: PostgresStateAdapter,
) -> None:
    await _register(pg_state, TypeEndHooks(type_name="t", on_cancelled=HOOK))
    async with pg_state.transaction() as tx:
        await tx.connection.execute("SET LOCAL TimeZone = 'Asia/Kolkata'")
        [created] = await tx.jobs_create(JobsCreate(jobs=[_new()], now=NOW))
        await tx.chains_cancel(ChainsCancel(chain_ids=[created.job.id], reason="why", now=NOW))
    [hook] = await _hooks(pg_state)
    assert isinstance(hook.input, dict)
    assert hook.input["at"] == "2030-01-01T00:00:00.000000+00:00"
    assert sorted(hook.input) == sorted(JobEnded.__struct_fields__)
    assert (hook.created_at, hook.scheduled_at, _ended(hook).reason) == (NOW, NOW, "why")


@pytest.fixture
def decoy_schema(postgres_url: str) -> Iterator[str]:
    """A schema holding a gen_random_uuid() that always returns the same id."""
    name = f"jc_decoy_{new_id().replace('-', '')[:12]}"
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        connection.execute(
            sql.SQL(
                "CREATE FUNCTION {}.gen_random_uuid() RETURNS uuid LANGUAGE sql"
                " AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid $$"
            ).format(sql.Identifier(name))
        )
    yield name
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_a_callers_search_path_cannot_redirect_the_trigger_function(
    pg_state: PostgresStateAdapter, decoy_schema: str
) -> None:
    await _register(pg_state, TypeEndHooks(type_name="t", on_failed=HOOK))
    async with pg_state.transaction() as tx:
        [created] = await tx.jobs_create(JobsCreate(jobs=[_new()], now=NOW))
        # The decoy ahead of pg_catalog: unqualified calls in the caller's statements would reach it.
        await tx.connection.execute(
            sql.SQL("SET LOCAL search_path = {}, pg_catalog").format(sql.Identifier(decoy_schema))
        )
        await tx.job_fail(JobFail(job_id=created.job.id, error="no", now=NOW))
    [hook] = await _hooks(pg_state)
    assert hook.id != "00000000-0000-0000-0000-000000000000"
    assert (hook.chain_id, _ended(hook).job_id) == (hook.id, created.job.id)


async def test_the_hooks_of_one_table_prefix_never_fire_in_another(
    pg_state: PostgresStateAdapter, postgres_url: str
) -> None:
    other = await PostgresStateAdapter.open(
        postgres_url, StateOptions(schema=pg_state.options.schema, table_prefix="other_", pool_min_size=0)
    )
    try:
        await other.migrate()
        await _register(pg_state, TypeEndHooks(type_name="t", on_failed=HOOK))
        async with other.transaction() as tx:
            [created] = await tx.jobs_create(JobsCreate(jobs=[_new()], now=NOW))
            await tx.job_fail(JobFail(job_id=created.job.id, error="no", now=NOW))
        assert await _hooks(other) == []
        assert await _hooks(pg_state) == []
        await _register(other, TypeEndHooks(type_name="t", on_failed=HOOK))
        async with other.transaction() as tx:
            [created] = await tx.jobs_create(JobsCreate(jobs=[_new()], now=NOW))
            await tx.job_fail(JobFail(job_id=created.job.id, error="no", now=NOW))
        assert [_ended(h).job_id for h in await _hooks(other)] == [created.job.id]
        assert await _hooks(pg_state) == []
    finally:
        await other.close()
