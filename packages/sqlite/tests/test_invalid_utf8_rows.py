"""Rows holding invalid UTF-8 (written by jobchain before 0.x refused lone surrogates) never wedge
a connection: the worker, the reaper and every listing keep running, the bad bytes read back as
U+FFFD, and a caller's own connection gets a typed error and stays usable.

SQLite's JSON functions turn a JSON escape for half a surrogate pair (``"\\ud800"``) into bytes
that are not UTF-8; older versions wrote deduplication and ordering keys that way.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import aiosqlite
import pytest

import jobchain
from jobchain import Deduplication
from jobchain.contracts import JobsReapExpired
from jobchain.testing import run_until_idle
from jobchain.worker import Attempt, Completed, Processors
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter, SqliteStateError

BAD = "CAST(X'6F726465722DEDA080' AS TEXT)"
"""``order-`` followed by the CESU-8 bytes of U+D800: what json_extract stores for ``"\\ud800"``."""
READ_BACK = "order-\ufffd\ufffd\ufffd"


def _corrupt(path: Path, job_id: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"UPDATE jobchain_job SET deduplication_key = {BAD}, ordering_key = {BAD} WHERE id = ?",
            (job_id,),
        )
        conn.execute(f"UPDATE jobchain_ordering_key SET key = {BAD}")
    conn.close()


async def _migrated(path: Path) -> str:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    await adapter.migrate()
    await adapter.close()
    return f"sqlite:///{path}"


TYPES = jobchain.JobTypes()
ECHO = TYPES.define("echo", input=int, output=int, entry=True)


def _types() -> tuple[jobchain.JobTypes, jobchain.JobType[int, int, Any, Literal[True]]]:
    return TYPES, ECHO


async def test_a_bad_row_does_not_stop_the_worker_and_reads_back_replaced(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    types, echo = _types()
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    async with await jobchain.connect(await _migrated(path), notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            bad = await client.start_chain(
                tx, echo, 1, deduplication=Deduplication(key="order-1"), ordering_key="order-1"
            )
            others = [await client.start_chain(tx, echo, n) for n in (2, 3)]
        _corrupt(path, bad.id)

        runs = await run_until_idle(client, processors)
        ran = sorted(run.job.id for run in runs if run.job is not None)
        assert ran == sorted([bad.id, *(c.id for c in others)])
        chains = await client.list_chains()
        assert {c.id: c.status for c in chains.items} == {c.id: "completed" for c in [bad, *others]}
        jobs = await client.list_jobs(job_ids=[bad.id])
        assert jobs.items[0].deduplication_key == READ_BACK
        job = await client.get_job(bad.id)
        assert job is not None
        assert job.ordering_key == READ_BACK


async def test_the_reaper_reads_a_bad_running_row(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    types, echo = _types()
    async with await jobchain.connect(await _migrated(path), notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            bad = await client.start_chain(tx, echo, 1, deduplication=Deduplication(key="order-1"))
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE jobchain_job SET status = 'running', leased_by = 'w', leased_until = ?, "
            f"deduplication_key = {BAD} WHERE id = ?",
            ("2000-01-01T00:00:00.000000Z", bad.id),
        )
    conn.close()
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        async with adapter.transaction() as state:
            reaped = await state.jobs_reap_expired(
                JobsReapExpired(type_names=["echo"], now=datetime.now(UTC), limit=10)
            )
        assert [job.id for job in reaped] == [bad.id]
        assert reaped[0].deduplication_key == READ_BACK
        async with adapter.transaction() as state:  # the connection is still usable
            await state.jobs_reap_expired(
                JobsReapExpired(type_names=["echo"], now=datetime.now(UTC) + timedelta(days=1), limit=10)
            )
    finally:
        await adapter.close()


async def test_a_joined_connection_gets_a_typed_error_and_stays_usable(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    types, echo = _types()
    async with await jobchain.connect(await _migrated(path), notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            bad = await client.start_chain(tx, echo, 1, deduplication=Deduplication(key="order-1"))
    _corrupt(path, bad.id)

    async with await jobchain.connect(f"sqlite:///{path}", notify="none", job_types=types) as client:
        async with aiosqlite.connect(path, isolation_level=None) as conn:
            await conn.execute("BEGIN IMMEDIATE")
            with pytest.raises(SqliteStateError, match="not valid UTF-8") as info:
                async with client.transaction(connection=conn) as tx:
                    await client.get_job(bad.id, tx=tx)
            assert "Could not decode" not in str(info.value)
            # Its statement was closed: the caller's transaction still commits.
            await conn.execute("CREATE TABLE mine (x)")
            await conn.commit()
            async with conn.execute("SELECT count(*) FROM mine") as cursor:
                assert await cursor.fetchone() == (0,)


def test_the_synchronous_adapter_reads_a_bad_row(tmp_path: Path) -> None:
    from jobchain.contracts import JobGet, JobsCreate, NewJob
    from jobchain.entities import new_id
    from jobchain.sync.drive import drive
    from jobchain_sqlite.sync import SyncSqliteStateAdapter

    path = tmp_path / "jobs.db"
    adapter = SyncSqliteStateAdapter(str(path))
    job_id = new_id()

    async def scenario() -> str | None:
        await adapter.migrate()
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[NewJob(id=job_id, type_name="t", chain_type_name="t")]))
        _corrupt(path, job_id)
        async with adapter.transaction(read_only=True) as tx:
            job = await tx.job_get(JobGet(job_id=job_id))
        return None if job is None else job.deduplication_key

    try:
        assert drive(scenario()) == READ_BACK
    finally:
        drive(adapter.close())
