"""Plain-root batches in jobs_create: the JSON handed to SQLite and the jobs built from it.

The batch's insert items are written with msgspec (json.dumps for the rare string UTF-8
cannot carry); whatever the text holds, the returned jobs must equal the stored rows.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from jobchain import ChainStart, Client, JobTypes
from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import JobStatus, Schedule, new_ids
from jobchain.errors import DuplicateJobIdError
from jobchain_sqlite import SqliteStateAdapter
from jobchain_sqlite.create import _dump_items

NOW = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

AWKWARD = ["é ü ß", "😀 and 𝄞", "tab\tnew\nline", '"quoted" \\ back', "\u2028\u2029", "\x01\x1f", ""]


def test_items_decode_to_themselves() -> None:
    items: list[list[object]] = [[text, 0, None, 12345678901234] for text in AWKWARD]
    assert json.loads(_dump_items(items)) == items


def test_a_lone_surrogate_gets_json_dumps_escape() -> None:
    items: list[list[object]] = [["\ud800", 1, None]]
    assert _dump_items(items) == json.dumps(items, separators=(",", ":"))


async def test_awkward_inputs_come_back_as_stored(adapter: SqliteStateAdapter) -> None:
    ids = new_ids(len(AWKWARD) + 2)
    jobs = [
        NewJob(id=i, type_name="t", chain_type_name="t", input={"text": text, "list": [text]})
        for i, text in zip(ids, AWKWARD, strict=False)
    ]
    jobs.append(NewJob(id=ids[-2], type_name="t", chain_type_name="t", input="😀", trace_context={"é": 1}))
    jobs.append(
        NewJob(
            id=ids[-1],
            type_name="u",
            chain_type_name="u",
            input=[1.5, True, None],
            schedule=Schedule(after=timedelta(seconds=0)),
            chain_trace_context="c",
        )
    )
    async with adapter.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW))
    assert [c.job.id for c in created] == ids
    assert all(not c.deduplicated and c.incomplete_blocker_chain_ids == () for c in created)
    async with adapter.transaction(read_only=True) as tx:
        for result, job in zip(created, jobs, strict=True):
            stored = await tx.job_get(JobGet(job_id=job.id))
            assert stored == result.job
            assert stored is not None
            assert stored.input == job.input
            assert stored.status is JobStatus.PENDING
            assert stored.scheduled_at == NOW


async def test_a_large_batch_returns_the_stored_rows(adapter: SqliteStateAdapter) -> None:
    # From _OVERLAP_FROM items the jobs are built while the insert runs.
    jobs = [
        NewJob(id=i, type_name="t", chain_type_name="t", input={"n": n}) for n, i in enumerate(new_ids(300))
    ]
    async with adapter.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW))
    assert [c.job.id for c in created] == [j.id for j in jobs]
    async with adapter.transaction(read_only=True) as tx:
        for result in created:
            assert await tx.job_get(JobGet(job_id=result.job.id)) == result.job


async def test_a_large_batch_with_a_taken_id_raises_duplicate_and_inserts_nothing(
    adapter: SqliteStateAdapter,
) -> None:
    taken = NewJob(id=new_ids(1)[0], type_name="t", chain_type_name="t")
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[taken], now=NOW))
    fresh = [NewJob(id=i, type_name="t", chain_type_name="t") for i in new_ids(200)]
    async with adapter.transaction() as tx:
        with pytest.raises(DuplicateJobIdError) as raised:
            await tx.jobs_create(JobsCreate(jobs=[*fresh[:150], taken, *fresh[150:]], now=NOW))
        assert raised.value.job_id == taken.id
        for job in fresh:
            assert await tx.job_get(JobGet(job_id=job.id)) is None


@pytest.mark.parametrize("kind", ["own", "aiosqlite", "sqlalchemy-session", "sqlalchemy-connection"])
async def test_a_large_batch_through_the_client_on_every_kind_of_connection(
    adapter: SqliteStateAdapter, db_path: Path, kind: str
) -> None:
    """The insert runs in a task of its own while the jobs are built: also on joined connections."""
    types = JobTypes()
    ship = types.define("ship", input=int, output=None, entry=True)
    client = Client(adapter, None, types)
    starts = [ChainStart(job_type=ship, input=n) for n in range(150)]
    if kind == "own":
        async with client.transaction() as tx:
            started = await client.start_chains(tx, starts)
    elif kind == "aiosqlite":
        async with aiosqlite.connect(db_path) as conn:
            async with client.transaction(connection=conn) as tx:
                started = await client.start_chains(tx, starts)
            await conn.commit()
    else:
        engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")
        try:
            if kind == "sqlalchemy-session":
                async with AsyncSession(engine) as session, session.begin():
                    async with client.transaction(connection=session) as tx:
                        started = await client.start_chains(tx, starts)
            else:
                async with engine.begin() as sa_conn:
                    async with client.transaction(connection=sa_conn) as tx:
                        started = await client.start_chains(tx, starts)
        finally:
            await engine.dispose()
    assert [s.chain.root.input for s in started] == list(range(150))
    page = await client.list_chains(chain_ids=[s.id for s in started], limit=500)
    assert {c.id: c for c in page.items} == {s.id: s.chain for s in started}
