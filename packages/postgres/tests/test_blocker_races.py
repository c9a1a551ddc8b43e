"""Creating a job blocked by a chain whose last job other transactions change under the statement.

A running blocker's row changes all the time (lease renewals, claims). Only a *completion* that
commits under the creating statement can hide a continuation from the statement's snapshot: that
one must make the adapter decide again; plain updates must neither fail the creation nor cost a
second statement.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import JobComplete, JobGet, JobRenewLease, JobsAcquire, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres._tx import PostgresStateTx

from .conftest import conninfo, open_state
from .test_statements import CountingCursor

LEASE = timedelta(seconds=30)


class Creator:
    """A state adapter on one counted connection, whose backend pid is known."""

    def __init__(self, adapter: PostgresStateAdapter, pid: int) -> None:
        self.adapter = adapter
        self.pid = pid


@pytest.fixture
async def creator(postgres_url: str, schema_name: str) -> AsyncIterator[Creator]:
    connection = await psycopg.AsyncConnection.connect(
        conninfo(postgres_url), autocommit=True, cursor_factory=CountingCursor, prepare_threshold=0
    )
    adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    await adapter.migrate()
    yield Creator(adapter, connection.info.backend_pid)
    await adapter.close()
    await connection.close()


@pytest.fixture
async def other(postgres_url: str, schema_name: str, creator: Creator) -> AsyncIterator[PostgresStateAdapter]:
    """A second adapter on the same schema: the 'worker' changing the blocker."""
    adapter = await open_state(postgres_url, schema_name)
    yield adapter
    await adapter.close()


def dependent_of(blocker: str) -> NewJob:
    return NewJob(id=new_id(), type_name="tail", chain_type_name="tail", blocker_chain_ids=[blocker])


async def start_running(state: PostgresStateAdapter, type_name: str = "head") -> str:
    job_id = new_id()
    async with state.transaction() as tx:
        await tx.jobs_create(
            JobsCreate(jobs=[NewJob(id=job_id, type_name=type_name, chain_type_name=type_name)])
        )
    async with state.transaction() as tx:
        acquired = await tx.jobs_acquire(JobsAcquire(type_names=[type_name], worker_id="w", lease_for=LEASE))
    assert [job.id for job in acquired.jobs] == [job_id]
    return job_id


async def wait_until_lock_wait(state: PostgresStateAdapter, pid: int) -> None:
    async with asyncio.timeout(10):
        while True:
            async with state.transaction(read_only=True) as tx:
                cursor = await tx.connection.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                )
                row = await cursor.fetchone()
            if row is not None and row[0] == "Lock":
                return
            await asyncio.sleep(0.01)


async def create_while_held(
    creator: Creator,
    other: PostgresStateAdapter,
    job: NewJob,
    change: Callable[[PostgresStateTx], Awaitable[None]],
) -> tuple[list[str], str]:
    """Let ``other`` lock the blocker and ``change`` it; create ``job`` meanwhile (it waits), then commit
    the change. Returns the statements the creation sent and the created job's status."""
    locked, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with other.transaction() as tx:
            await change(tx)
            locked.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await locked.wait()

    async def create() -> tuple[list[str], str]:
        async with creator.adapter.transaction() as tx:
            CountingCursor.sent.clear()
            [created] = await tx.jobs_create(JobsCreate(jobs=[job]))
            sent = [s.decode().splitlines()[0] for s in CountingCursor.sent]
        return sent, created.job.status

    creating = asyncio.create_task(create())
    await wait_until_lock_wait(other, creator.pid)
    release.set()
    await holder
    return await creating


async def test_a_lease_renewal_under_the_statement_costs_no_second_statement(
    creator: Creator, other: PostgresStateAdapter
) -> None:
    blocker = await start_running(creator.adapter)

    async def renew(tx: PostgresStateTx) -> None:
        await tx.job_renew_lease(JobRenewLease(job_id=blocker, worker_id="w", lease_for=LEASE * 2))

    sent, status = await create_while_held(creator, other, dependent_of(blocker), renew)
    assert status == "blocked"
    assert len(sent) == 1, sent


async def test_a_completion_with_continuation_under_the_statement_keeps_the_dependent_blocked(
    creator: Creator, other: PostgresStateAdapter
) -> None:
    blocker = await start_running(creator.adapter)

    async def complete_and_continue(tx: PostgresStateTx) -> None:
        await tx.job_get(JobGet(job_id=blocker, lock=True))
        step = NewJob(id=new_id(), type_name="head", chain_type_name="head", chain_id=blocker, chain_index=1)
        await tx.jobs_create(JobsCreate(jobs=[step]))
        await tx.job_complete(JobComplete(job_id=blocker, worker_id="w"))

    sent, status = await create_while_held(creator, other, dependent_of(blocker), complete_and_continue)
    # The first run saw the step still running and could not see the continuation: it must decide
    # again, and the chain goes on, so the dependent waits.
    assert status == "blocked"
    assert len(sent) == 2, sent


async def test_a_completion_without_continuation_under_the_statement_makes_the_dependent_pending(
    creator: Creator, other: PostgresStateAdapter
) -> None:
    blocker = await start_running(creator.adapter)

    async def complete(tx: PostgresStateTx) -> None:
        await tx.job_get(JobGet(job_id=blocker, lock=True))
        await tx.job_complete(JobComplete(job_id=blocker, worker_id="w"))

    _, status = await create_while_held(creator, other, dependent_of(blocker), complete)
    assert status == "pending"


async def _keep_updating(dsn: str, state: PostgresStateAdapter, job_id: str, stop: asyncio.Event) -> int:
    """Update the job's row in short committed transactions, as a claim does just before a creating
    statement locks the row (a plain update does not wait for FOR KEY SHARE)."""
    table = sql.Identifier(state.options.schema, f"{state.options.table_prefix}job")
    statement = sql.SQL(
        "UPDATE {} SET leased_until = leased_until + interval '1 millisecond' WHERE id = %s"
    ).format(table)
    updates = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        while not stop.is_set():
            await connection.execute(statement, (job_id,))
            updates += 1
    return updates


async def test_dependents_of_a_constantly_updated_blocker_are_all_created_and_released(
    pg_state: PostgresStateAdapter, postgres_url: str
) -> None:
    blocker = await start_running(pg_state)
    stop = asyncio.Event()
    updaters = [
        asyncio.create_task(_keep_updating(conninfo(postgres_url), pg_state, blocker, stop)) for _ in range(3)
    ]
    created: list[str] = []
    try:
        for _ in range(200):
            dependent = dependent_of(blocker)
            async with pg_state.transaction() as tx:
                [result] = await tx.jobs_create(JobsCreate(jobs=[dependent]))
            assert result.job.status == "blocked"
            assert result.incomplete_blocker_chain_ids == (blocker,)
            created.append(dependent.id)
    finally:
        stop.set()
        updates = sum(await asyncio.gather(*updaters))
    assert updates > 0

    async with pg_state.transaction() as tx:
        await tx.job_complete(JobComplete(job_id=blocker, worker_id="w"))
    async with pg_state.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=["tail"], worker_id="w", lease_for=LEASE, limit=len(created))
        )
    assert sorted(job.id for job in acquired.jobs) == sorted(created)


async def wait_for_xmin(probe: psycopg.AsyncConnection[Any], pid: int, reached: Callable[..., bool]) -> bool:
    """Until the snapshot xmin of backend ``pid`` satisfies ``reached`` (False after 3 s)."""
    query = "SELECT backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = %s"
    with suppress(TimeoutError):
        async with asyncio.timeout(3):
            while True:
                row = await (await probe.execute(query, (pid,))).fetchone()
                if row is not None and row[0] is not None and reached(row[0]):
                    return True
                await asyncio.sleep(0.001)
    return False


async def test_a_dependent_committed_while_a_completion_statement_runs_is_released_by_it(
    creator: Creator, other: PostgresStateAdapter, postgres_url: str
) -> None:
    """The completing statement takes its snapshot, then a job blocked by the completing chain is
    created and committed, and only then does the statement lock the blocker's row. Deciding
    from that snapshot alone would leave the dependent blocked by a completed chain forever.

    The window is made wide and found on purpose: many unknown ids in the group keep the
    statement busy before its lock, and its snapshot is recognised by its xmin, which a
    transaction held open while the parameters are read pins below the one taken afterwards.
    Another test's long transaction can hide that change: the scenario is then run again."""
    for _ in range(5):
        blocker = await start_running(creator.adapter)
        decoys = [JobComplete(job_id=new_id(), worker_id="w") for _ in range(300_000)]
        group = [*decoys, JobComplete(job_id=blocker, worker_id="w")]
        async with (
            await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True) as probe,
            await psycopg.AsyncConnection.connect(conninfo(postgres_url)) as pin,
        ):
            row = await (await pin.execute("SELECT txid_current() % 4294967296")).fetchone()
            assert row is not None
            pinned = int(row[0])

            async def complete(group: list[JobComplete] = group) -> list[object]:
                async with creator.adapter.transaction() as tx:
                    assert isinstance(tx, PostgresStateTx)
                    return list(await tx.jobs_complete(group))

            completing = asyncio.create_task(complete())
            # Binding: the parameters are read under a snapshot the pin holds back.
            binding = await wait_for_xmin(probe, creator.pid, lambda xmin, pinned=pinned: xmin <= pinned)
            await pin.commit()
            # Executing: the statement's own snapshot, taken after the pin was released.
            executing = binding and await wait_for_xmin(
                probe, creator.pid, lambda xmin, pinned=pinned: xmin > pinned
            )
            dependent = dependent_of(blocker)
            if executing:
                async with other.transaction() as tx:
                    [created] = await tx.jobs_create(JobsCreate(jobs=[dependent]))
            results = await completing
        if executing:
            break
    else:
        pytest.fail("never saw the completing statement's snapshot taken; the window was not hit")
    assert created.job.status == "blocked", "the creation must commit before the completion does"
    assert type(results[-1]).__name__ == "JobCompleted"
    async with other.transaction(read_only=True) as tx:
        stored = await tx.job_get(JobGet(job_id=dependent.id))
    assert stored is not None
    assert stored.status == "pending", "the dependent stayed blocked by a completed chain"
