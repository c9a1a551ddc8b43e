"""One round trip per contract operation, counted on the wire, and server-side prepared statements.

The adapter runs on one psycopg connection whose cursor factory counts every statement sent
through it. BEGIN/COMMIT are the transaction's own and not counted; every operation must send
exactly one statement, including its refusals (a non-owner's renewal is one statement too),
except completions, which send a lock and the completing statement together in one pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobchain.contracts import (
    BlockedJobsList,
    ChainGet,
    ChainJobsList,
    ChainsCancel,
    ChainsDelete,
    ChainsList,
    ChainsPrune,
    JobBlockersGet,
    JobComplete,
    JobFail,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsRetry,
    JobsTrigger,
    NewJob,
    QueueStatsGet,
)
from jobchain.entities import Deduplication, Schedule, new_id
from jobchain.errors import JobTakenByAnotherWorkerError
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres._tx import PostgresStateTx

from .conftest import conninfo

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)


class CountingCursor(psycopg.AsyncCursor[Any]):
    """Counts every statement executed through it, on a list shared by the connection."""

    sent: list[bytes]
    pipelined: list[bool]
    """Per statement sent: whether it went out in pipeline mode (no wait for its result)."""

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, bytes) else str(query).encode()
        CountingCursor.sent.append(text)
        CountingCursor.pipelined.append(self.connection.info.pipeline_status != psycopg.pq.PipelineStatus.OFF)
        return await super().execute(query, params, **kwargs)


CountingCursor.sent = []
CountingCursor.pipelined = []


@pytest.fixture
async def counted(postgres_url: str, schema_name: str) -> AsyncIterator[PostgresStateAdapter]:
    connection = await psycopg.AsyncConnection.connect(
        conninfo(postgres_url), autocommit=True, cursor_factory=CountingCursor, prepare_threshold=0
    )
    adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    await adapter.migrate()
    yield adapter
    await adapter.close()
    await connection.close()


def new(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


async def statements(
    adapter: PostgresStateAdapter, op: Callable[[PostgresStateTx], Awaitable[Any]]
) -> list[str]:
    """Run ``op`` in its own transaction; return the first line of every statement it sent."""
    async with adapter.transaction() as tx:
        CountingCursor.sent.clear()
        CountingCursor.pipelined.clear()
        await op(tx)
        sent = list(CountingCursor.sent)
    return [s.decode().splitlines()[0] for s in sent]


async def until_lock_wait(postgres_url: str, pid: int, task: asyncio.Task[Any], what: str) -> None:
    """Until backend ``pid`` waits for a lock (pg_stat_activity); ``task`` ending first fails: ``what``."""
    query = "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s"
    async with await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True) as probe:
        async with asyncio.timeout(30):
            while not task.done():
                row = await (await probe.execute(query, (pid,))).fetchone()
                if row is not None and row[0] == "Lock":
                    return
                await asyncio.sleep(0.005)  # polling a condition: how long it takes changes nothing
    task.result()  # its own error, if it failed
    pytest.fail(what)


async def backend_pid(adapter: PostgresStateAdapter) -> int:
    async with adapter.transaction(read_only=True) as tx:
        return tx.connection.info.backend_pid


def round_trips(sent: list[str]) -> list[list[str]]:
    """The statements of the last ``statements`` call grouped by round trip: a pipeline is one."""
    trips: list[list[str]] = []
    for line, pipelined in zip(sent, CountingCursor.pipelined, strict=True):
        name = line.split(":")[0].removeprefix("-- ")
        if pipelined and not name.endswith("_lock") and trips:
            trips[-1].append(name)
        else:
            trips.append([name])
    return trips


PIPELINED = {
    "job_fail": ["job_fail_lock", "job_fail", "jobs_propagate"],
    "chains_cancel": ["chains_cancel_lock", "chains_cancel", "jobs_propagate"],
    "chains_delete": ["chains_delete_lock", "chains_delete"],
    "queue_stats": ["jit_off", "queue_stats", "jit_restore"],
    "chains_prune": ["jit_off", "chains_prune", "jit_restore"],
}
"""Operations that send several statements in one pipeline (one round trip)."""


async def test_every_operation_sends_exactly_one_statement(counted: PostgresStateAdapter) -> None:
    adapter = counted
    blocker, step_root = new("blocker"), new()
    dependent = new("dependent", blocker_chain_ids=[blocker.id])
    deduped = new(deduplication=Deduplication(key="k"))
    batch = [blocker, step_root, dependent, deduped, new(deduplication=Deduplication(key="k"))]
    step = NewJob(id=new_id(), type_name="t", chain_type_name="t", chain_id=step_root.id, chain_index=1)
    acquire = JobsAcquire(type_names=["t", "blocker"], worker_id="w", lease_for=LEASE, limit=5, now=NOW)

    # Hold the results of earlier operations for later ones.
    got: dict[str, Any] = {}

    async def acquire_op(tx: PostgresStateTx) -> None:
        got["acquired"] = await tx.jobs_acquire(acquire)

    async def other_worker_renews(tx: PostgresStateTx) -> None:
        job = got["acquired"].jobs[0]
        with pytest.raises(JobTakenByAnotherWorkerError):
            await tx.job_renew_lease(
                JobRenewLease(job_id=job.id, worker_id="other", lease_for=LEASE, now=NOW)
            )

    def job_of(type_name: str) -> str:
        return next(j.id for j in got["acquired"].jobs if j.type_name == type_name)

    operations: list[tuple[str, Callable[[PostgresStateTx], Awaitable[Any]]]] = [
        ("jobs_create (deduplicating)", lambda tx: tx.jobs_create(JobsCreate(jobs=batch, now=NOW))),
        ("jobs_create", lambda tx: tx.jobs_create(JobsCreate(jobs=[step], now=NOW))),
        ("jobs_create_roots", lambda tx: tx.jobs_create(JobsCreate(jobs=[new(), new()], now=NOW))),
        ("chain_get", lambda tx: tx.chain_get(ChainGet(chain_id=step_root.id))),
        ("chain_get_locked", lambda tx: tx.chain_get(ChainGet(chain_id=step_root.id, lock=True))),
        ("job_get", lambda tx: tx.job_get(JobGet(job_id=dependent.id))),
        ("job_get_locked", lambda tx: tx.job_get(JobGet(job_id=dependent.id, lock=True))),
        ("job_blockers_get", lambda tx: tx.job_blockers_get(JobBlockersGet(job_id=dependent.id))),
        ("job_next_available", lambda tx: tx.job_next_available(JobNextAvailable(type_names=["t"], now=NOW))),
        ("jobs_acquire", acquire_op),
        ("job_renew_lease", other_worker_renews),
        (
            "job_renew_lease",
            lambda tx: tx.job_renew_lease(
                JobRenewLease(job_id=job_of("t"), worker_id="w", lease_for=LEASE, now=NOW)
            ),
        ),
        (
            "job_reschedule",
            lambda tx: tx.job_reschedule(
                JobReschedule(
                    job_id=job_of("t"), schedule=Schedule(after=LEASE), error="e", worker_id="w", now=NOW
                )
            ),
        ),
        (
            "job_complete",
            lambda tx: tx.job_complete(JobComplete(job_id=job_of("blocker"), worker_id="w", now=NOW)),
        ),
        (
            "jobs_reap_expired",
            lambda tx: tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=NOW + 2 * LEASE)),
        ),
        ("jobs_trigger", lambda tx: tx.jobs_trigger(JobsTrigger(job_ids=[dependent.id], now=NOW))),
        (
            "chains_list",
            lambda tx: tx.chains_list(ChainsList(type_names=["t"], statuses=["pending"], limit=2)),
        ),
        ("jobs_list", lambda tx: tx.jobs_list(JobsList(chain_ids=[step_root.id]))),
        ("jobs_list", lambda tx: tx.jobs_list(JobsList(leased_by=["w"]))),
        (
            "queue_stats",
            lambda tx: tx.queue_stats(QueueStatsGet(throughput_window=timedelta(minutes=5), now=NOW)),
        ),
        ("chain_jobs_list", lambda tx: tx.chain_jobs_list(ChainJobsList(chain_id=step_root.id))),
        ("blocked_jobs_list", lambda tx: tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=blocker.id))),
        ("job_fail", lambda tx: tx.job_fail(JobFail(job_id=step.id, error="gave up", now=NOW))),
        ("jobs_retry", lambda tx: tx.jobs_retry(JobsRetry(job_ids=[step.id], now=NOW))),
        ("chains_cancel", lambda tx: tx.chains_cancel(ChainsCancel(chain_ids=[step_root.id], now=NOW))),
        ("chains_prune", lambda tx: tx.chains_prune(ChainsPrune(cancelled_before=NOW, limit=5))),
        ("chains_delete", lambda tx: tx.chains_delete(ChainsDelete(chain_ids=[dependent.id], cascade=True))),
    ]
    for name, op in operations:
        sent = await statements(adapter, op)
        if name == "job_complete":
            assert round_trips(sent) == [["jobs_lock", "job_complete"]], sent
            continue
        if name == "job_get_locked":
            # The hold (an advisory lock, sql/job_hold.sql), then the read: one round trip.
            assert round_trips(sent) == [["job_hold", "job_get"]], sent
            continue
        if name in PIPELINED:
            assert round_trips(sent) == [PIPELINED[name]], sent
            continue
        if name == "jobs_acquire":
            # No priority in play: the plain claim statement alone (see _claims.py).
            assert round_trips(sent) == [["jobs_acquire_plain"]], sent
            continue
        if name == "jobs_create (deduplicating)":
            # Deduplicating starts lock their keys first, in the same pipeline (one round trip).
            assert round_trips(sent) == [["jobs_deduplication_lock", "jobs_create"]], sent
            continue
        assert len(sent) == 1, f"{name} sent {len(sent)} statements: {sent}"
        listing = name.endswith("_list")
        assert sent[0].startswith(f"-- {name}:") or (listing and name in sent[0]), (name, sent[0])


async def test_completion_waits_and_retries_only_when_another_transaction_holds_the_row(
    counted: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    adapter = counted
    job = new()
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
    pid = await backend_pid(adapter)
    other = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        async with other.transaction() as holder:
            # A row lock (job_get's lock is an advisory hold, which completions do not wait for).
            await holder.chain_get(ChainGet(chain_id=job.id, lock=True))

            async def complete(tx: PostgresStateTx) -> None:
                await tx.job_complete(JobComplete(job_id=job.id, now=NOW))

            waiting = asyncio.create_task(statements(adapter, complete))
            await until_lock_wait(postgres_url, pid, waiting, "job_complete did not wait for the row lock")
        sent = await asyncio.wait_for(waiting, 10)
    finally:
        await other.close()
    assert round_trips(sent) == [["jobs_lock", "job_complete"], ["job_lock", "job_complete"]]


async def test_statements_are_prepared_on_the_server(counted: PostgresStateAdapter) -> None:
    async with counted.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[new()], now=NOW))
        await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, now=NOW))
        cursor = await tx.connection.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in await cursor.fetchall()]
    assert any(text.startswith("-- jobs_create_roots:") for text in prepared)
    # No priority in play: the claim is the plain statement (see _claims.py).
    assert any(text.startswith("-- jobs_acquire_plain:") for text in prepared)


async def test_a_start_waiting_for_a_blocker_that_continues_sees_the_continuation(
    counted: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    adapter = counted
    head = new("head")
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[head], now=NOW))
    pid = await backend_pid(adapter)
    other = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    dependent = new("join", blocker_chain_ids=[head.id])
    created: list[Any] = []

    async def start_dependent(tx: PostgresStateTx) -> None:
        created.extend(await tx.jobs_create(JobsCreate(jobs=[dependent], now=NOW)))

    try:
        async with other.transaction() as worker:
            # The blocker's job hands over to a continuation and completes, uncommitted.
            step = NewJob(
                id=new_id(), type_name="tail", chain_type_name="head", chain_id=head.id, chain_index=1
            )
            await worker.jobs_create(JobsCreate(jobs=[step], now=NOW))
            completed = await worker.job_complete(JobComplete(job_id=head.id, now=NOW))
            assert completed.chain_completed is False
            waiting = asyncio.create_task(statements(adapter, start_dependent))
            await until_lock_wait(
                postgres_url, pid, waiting, "the start did not wait for the completion in flight"
            )
        sent = await asyncio.wait_for(waiting, 10)
    finally:
        await other.close()
    # The first attempt saw a finished job but not its continuation, so it ran again.
    assert [line.split(":")[0] for line in sent] == ["-- jobs_create", "-- jobs_create"]
    [result] = created
    assert result.job.status.value == "blocked"
    assert result.incomplete_blocker_chain_ids == (head.id,)
