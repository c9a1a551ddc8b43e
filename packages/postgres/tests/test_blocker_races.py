"""Creating a job blocked by a chain whose last job other transactions change under the statement.

A running blocker's row changes all the time (lease renewals, claims). Only a *completion* that
commits under the creating statement can hide a continuation from the statement's snapshot: that
one must make the adapter decide again; plain updates must neither fail the creation nor cost a
second statement. The other way round, a dependent committed while a completion runs must be
released by it, and two completions of a job's last blockers must release it once, in both
claim modes.

Races are held open, never widened by CPU time: a transaction the test keeps open, or an advisory
lock the test holds, with pg_stat_activity telling when a backend waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import (
    Capability,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobGet,
    JobRenewLease,
    JobsAcquire,
    JobsCreate,
    NewJob,
    StateAdapter,
)
from jobchain.entities import new_id
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_concurrent_unblock import ConcurrentUnblockTests
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres._tx import PostgresStateTx
from jobchain_postgres.queries import Queries

from .conftest import conninfo, open_state
from .test_statements import CountingCursor

LEASE = timedelta(seconds=30)
DEADLINE = 30.0
"""Seconds after which a step that must happen is declared lost: a failure deadline only."""


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
    async with asyncio.timeout(DEADLINE):
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


async def wait_for_wait_event(
    probe: psycopg.AsyncConnection[Any], pid: int, event: str | None = None
) -> None:
    """Until backend ``pid`` waits for a heavyweight lock (of kind ``event``, when given)."""
    query = "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s"
    async with asyncio.timeout(DEADLINE):
        while True:
            row = await (await probe.execute(query, (pid,))).fetchone()
            if row is not None and row[0] == "Lock" and event in (None, row[1]):
                return
            await asyncio.sleep(0.005)  # polling a condition: how long it takes changes nothing


async def done_or_waiting(dsn: str, task: asyncio.Task[Any], pid: int) -> None:
    """Until ``task`` is done or its backend ``pid`` waits for a lock (polled on a connection
    of its own, which cancelling the poll may leave unusable)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe:
        waiting = asyncio.create_task(wait_for_wait_event(probe, pid))
        try:
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED, timeout=DEADLINE)
        finally:
            waiting.cancel()
            with suppress(asyncio.CancelledError, TimeoutError):
                await waiting


GATE = b"FOR UPDATE SKIP LOCKED"
"""Where a completion first locks rows: in jobs_lock, and in the deciding statements themselves."""


@dataclass(frozen=True, slots=True)
class GatedQueries(Queries):
    """The adapter's statements, with a wait on advisory lock ``key`` just before a completion's
    first row lock: the statement has taken its snapshot and holds no row yet. A test-only hook
    set on one transaction; every other statement is the adapter's own."""

    key: int = 0

    def __getattr__(self, name: str) -> bytes:
        statement = Queries.__getattr__(self, name)
        if name not in ("jobs_lock", "job_complete", "jobs_complete"):
            return statement
        assert GATE in statement, f"{name} no longer locks with {GATE!r}: move the gate"
        gate = f"AND (SELECT pg_advisory_xact_lock_shared({self.key:d})::text IS NOT NULL) "
        return statement.replace(GATE, gate.encode() + GATE, 1)


@pytest.mark.parametrize("group", [False, True], ids=["job_complete", "jobs_complete"])
async def test_a_dependent_committed_while_a_completion_statement_runs_is_released_by_it(
    creator: Creator, other: PostgresStateAdapter, postgres_url: str, group: bool
) -> None:
    """The completion takes its snapshot, then a job blocked by the completing chain is created
    and committed, and only then does the completion lock the blocker's row. Deciding from that
    snapshot alone (as one statement locking inside itself did) leaves the dependent blocked by
    a completed chain forever.

    The window is held open, not widened: the completion waits on an advisory lock this test
    holds, placed just before its first row lock (GatedQueries), and pg_stat_activity shows when
    it waits there and when the creation is done or waiting."""
    blocker = await start_running(creator.adapter)
    key = int(new_id().replace("-", "")[-15:], 16)  # this test's own advisory lock
    async with await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True) as probe:
        await probe.execute("SELECT pg_advisory_lock(%s)", (key,))

        async def complete() -> object:
            async with creator.adapter.transaction() as tx:
                assert isinstance(tx, PostgresStateTx)
                tx._q = GatedQueries(tx._q.schema, tx._q.prefix, key)  # the test-only gate
                item = JobComplete(job_id=blocker, worker_id="w")
                if group:
                    unknown = JobComplete(job_id=new_id(), worker_id="w")
                    return (await tx.jobs_complete([unknown, item]))[-1]
                return await tx.job_complete(item)

        async def create(job: NewJob, pid: asyncio.Future[int]) -> JobCreated:
            async with other.transaction() as tx:
                assert isinstance(tx, PostgresStateTx)
                pid.set_result(tx.connection.info.backend_pid)
                [created] = await tx.jobs_create(JobsCreate(jobs=[job]))
            return created

        completing = asyncio.create_task(complete())
        try:
            # Waiting at the gate: the completion's snapshot is taken and no row is locked yet.
            await wait_for_wait_event(probe, creator.pid, "advisory")
            dependent = dependent_of(blocker)
            pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            creating = asyncio.create_task(create(dependent, pid))
            await done_or_waiting(conninfo(postgres_url), creating, await asyncio.wait_for(pid, DEADLINE))
            creation_first = creating.done()
        finally:
            await probe.execute("SELECT pg_advisory_unlock(%s)", (key,))
        result = await asyncio.wait_for(completing, DEADLINE)
        created = await asyncio.wait_for(creating, DEADLINE)
    assert creation_first, "the creation waited for the completion: the gate was not before its row lock"
    assert created.job.status == "blocked", "the creation must commit before the completion does"
    assert isinstance(result, JobCompleted), result
    assert result.chain_completed
    async with other.transaction(read_only=True) as tx:
        stored = await tx.job_get(JobGet(job_id=dependent.id))
    assert stored is not None
    assert stored.status == "pending", "the dependent stayed blocked by a completed chain"
    assert [job.id for job in result.unblocked_jobs] == [dependent.id]


class TestConcurrentUnblockAtomicClaim(ConcurrentUnblockTests, StateSuiteBase):
    """The conformance cases of concurrent unblocking in the atomic-update claim mode as well.

    That mode does not declare CONCURRENT_TRANSACTIONS because its claims wait for open writers
    (test_conformance.py skips these cases there); these cases claim nothing while their two
    transactions are open, and completions are the same statements in both modes."""

    @pytest.fixture
    async def state_adapter(self, postgres_url: str, schema_name: str) -> AsyncIterator[StateAdapter]:
        adapter = await open_state(postgres_url, schema_name, "atomic-update")
        adapter.capabilities = adapter.capabilities | {Capability.CONCURRENT_TRANSACTIONS}
        yield adapter
        await adapter.close()
