"""Bad input and faults against the real server: unreachable servers, unknown roles, bad names,
statement timeouts, connections killed mid-transaction, a killed LISTEN connection, a failing
delivery self-check."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from jobchain import Client, JobTypes
from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import JobStatus, new_id
from jobchain.errors import (
    BackendUnreachableError,
    InvalidArgumentError,
    InvalidURLError,
    TransientStateError,
)
from jobchain.sync.drive import drive
from jobchain.worker import Attempt, Backoff, Completed, LeaseConfig, Processors, Worker
from jobchain_postgres import (
    NotifyOptions,
    PostgresNotifyAdapter,
    PostgresStateAdapter,
    StatementTimeoutError,
    StateOptions,
)
from jobchain_postgres.sync import SyncPostgresStateAdapter

from .conftest import conninfo, open_state, with_query

NOW = datetime(2030, 1, 1, tzinfo=UTC)
REFUSED = "postgresql://postgres@127.0.0.1:1/test"


def new_job(type_name: str = "t") -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name)


# ---------------------------------------------------------------- connecting


async def test_refused_connection_is_backend_unreachable() -> None:
    with pytest.raises(BackendUnreachableError, match=r"127\.0\.0\.1"):
        await PostgresStateAdapter.open(REFUSED)
    with pytest.raises(BackendUnreachableError, match=r"127\.0\.0\.1"):
        await PostgresNotifyAdapter.open(REFUSED)


async def test_rejected_credentials_are_backend_unreachable_and_never_show_the_password(
    postgres_url: str,
) -> None:
    # The test server trusts every local user, so a role that does not exist stands in for a
    # wrong password: the server refuses the login either way.
    url = postgres_url.replace("postgresql://postgres@", "postgresql://no_such_role_jc:s3cret-pw@", 1)
    with pytest.raises(BackendUnreachableError) as info:
        await PostgresStateAdapter.open(url)
    assert "no_such_role_jc" in str(info.value)
    assert "s3cret-pw" not in str(info.value)
    assert "s3cret-pw" not in repr(info.value.__cause__ or "")


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"schema": "jobs;drop"}, InvalidURLError),
        ({"schema": "a-b"}, InvalidURLError),
        ({"table_prefix": "x y"}, InvalidURLError),
        ({"schema": "s" * 64}, InvalidURLError),
        ({"claim": "optimistic"}, InvalidURLError),
        ({"pool_max_size": "lots"}, InvalidURLError),
    ],
)
async def test_bad_options_in_the_url_are_refused_before_connecting(
    query: dict[str, str], error: type
) -> None:
    # The URL points at a closed port: an attempt to connect would raise BackendUnreachableError.
    with pytest.raises(error):
        await PostgresStateAdapter.open(with_query(REFUSED, **query))


@pytest.mark.parametrize("schema", ['x"; DROP TABLE y; --', "sch ema", "", "ß"])
def test_schema_outside_the_identifier_alphabet_is_refused(schema: str) -> None:
    with pytest.raises(InvalidArgumentError, match="schema"):
        StateOptions(schema=schema)


@pytest.mark.parametrize("prefix", ["a-", "pre fix", "p" * 60])
def test_prefixes_outside_the_identifier_alphabet_or_too_long_are_refused(prefix: str) -> None:
    with pytest.raises(InvalidArgumentError):
        StateOptions(table_prefix=prefix)
    with pytest.raises(InvalidArgumentError):
        NotifyOptions(channel_prefix=prefix)


async def test_a_url_of_another_scheme_or_driver_is_refused() -> None:
    with pytest.raises(InvalidURLError, match="asyncpg"):
        await PostgresStateAdapter.open("postgresql+asyncpg://u@h/db")
    with pytest.raises(InvalidURLError, match="not a PostgreSQL URL"):
        await PostgresStateAdapter.open("redis://localhost")


# ---------------------------------------------------------------- statement timeout


async def test_statement_timeout_is_a_transient_error(postgres_url: str, schema_name: str) -> None:
    await (await open_state(postgres_url, schema_name)).close()
    timed = with_query(postgres_url, schema=schema_name, options="-c statement_timeout=200")
    adapter = await PostgresStateAdapter.open(timed, StateOptions(pool_min_size=0))
    holder = await open_state(postgres_url, schema_name)
    job = new_job()
    try:
        async with holder.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        async with holder.transaction() as tx:
            await tx.job_get(JobGet(job_id=job.id, lock=True))
            with pytest.raises(StatementTimeoutError) as info:
                async with adapter.transaction() as waiting:
                    await waiting.job_get(JobGet(job_id=job.id, lock=True))
        assert isinstance(info.value, TransientStateError)
        # The adapter is still usable afterwards.
        async with adapter.transaction() as tx:
            assert await tx.job_get(JobGet(job_id=job.id)) is not None
    finally:
        await adapter.close()
        await holder.close()


# ---------------------------------------------------------------- connections dropped mid-work


def terminate(url: str, application_name: str) -> int:
    """Kill every server connection of ``application_name`` (what a server restart does to them)
    and wait until each backend has exited.

    pg_terminate_backend only signals the backend: on a starved machine a signalled backend can
    still answer the pool's health check, then die under the statement that follows. With a
    timeout (PostgreSQL 14+) it returns once the process is gone.
    """
    with psycopg.connect(conninfo(url), autocommit=True) as connection:
        wait = ", 60000" if connection.info.server_version >= 140000 else ""
        rows = connection.execute(
            f"SELECT pg_terminate_backend(pid{wait}) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            [application_name],
        ).fetchall()
    assert all(gone for (gone,) in rows), f"a backend of {application_name} outlived 60 s after its signal"
    return len(rows)


async def test_a_pool_recovers_from_connections_the_server_dropped(
    postgres_url: str, schema_name: str
) -> None:
    name = f"jc_{uuid.uuid4().hex[:12]}"
    await (await open_state(postgres_url, schema_name)).close()
    url = with_query(postgres_url, schema=schema_name, application_name=name)
    adapter = await PostgresStateAdapter.open(url, StateOptions(pool_min_size=2, pool_max_size=2))
    try:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[new_job()], now=NOW))
        assert terminate(postgres_url, name) >= 1
        # BEGIN on a dead pooled connection discards it and uses a fresh one.
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[new_job()], now=NOW))
    finally:
        await adapter.close()


class SecondDeadConnection:
    """The ``configure`` hook of a two-connection pool whose second connection reaches the pool
    dead after the pool was checked: what a server restart does to a pool still opening its
    second connection (the backend runs and is killed; the client has not looked at it yet).

    The pool's first connection goes straight in. The second is held until a transaction waits
    for a connection (it found the first dead and had the pool checked), then handed to it.
    Every later (fresh) connection is held until both dead ones were handed back broken, so the
    transaction meets the second dead one whatever the machine's speed.
    """

    def __init__(self) -> None:
        self.pool: AsyncConnectionPool[Any] | ConnectionPool[Any] | None = None
        self._numbers = itertools.count(1)  # next() is atomic: the sync pool's workers are threads
        self.opened = 0

    def _released(self, number: int) -> bool:
        assert self.pool is not None
        stats = self.pool.get_stats()
        if number == 1:
            return True
        if number == 2:
            return stats.get("requests_waiting", 0) > 0
        return stats.get("returns_bad", 0) + stats.get("connections_lost", 0) >= 2

    def _number(self) -> int:
        number = next(self._numbers)
        self.opened = max(self.opened, number)
        return number

    async def configure(self, _connection: psycopg.AsyncConnection[Any]) -> None:
        number = self._number()
        async with asyncio.timeout(20):
            while not self._released(number):  # noqa: ASYNC110 -- the pool's state, no event to wait on
                await asyncio.sleep(0.01)

    def configure_sync(self, _connection: psycopg.Connection[Any]) -> None:
        number = self._number()
        deadline = time.monotonic() + 20
        while not self._released(number):
            if time.monotonic() > deadline:
                raise TimeoutError(f"connection {number} was never released")
            time.sleep(0.01)

    def opened_both(self) -> bool:
        """The first connection is in the pool, the second opened (its backend runs) and held."""
        assert self.pool is not None
        return self.opened >= 2 and self.pool.get_stats().get("pool_available", 0) >= 1


@pytest.mark.pg_connections(6)  # the pool's 2, their 2 replacements, terminate's, the migration's
@pytest.mark.parametrize("first", ["start", "read"])
async def test_a_transaction_begins_after_the_server_dropped_every_pooled_connection(
    postgres_url: str, schema_name: str, first: str
) -> None:
    name = f"jc_{uuid.uuid4().hex[:12]}"
    await (await open_state(postgres_url, schema_name)).close()
    gate = SecondDeadConnection()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        make_conninfo(conninfo(postgres_url), application_name=name),
        min_size=2,
        max_size=2,
        kwargs={"autocommit": True},
        configure=gate.configure,
        open=False,
    )
    gate.pool = pool
    await pool.open(wait=False)
    adapter = PostgresStateAdapter.from_pool(pool, StateOptions(schema=schema_name))
    try:
        await wait_until(gate.opened_both)
        assert terminate(postgres_url, name) == 2
        # Both connections are dead; the second reaches the pool only after the first failed.
        job = new_job()
        async with adapter.transaction() as tx:
            if first == "start":  # BEGIN goes with the INSERT, in one pipeline
                await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
            else:  # BEGIN on its own, then the statement
                assert await tx.job_get(JobGet(job_id=job.id)) is None
                await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        async with adapter.transaction(read_only=True) as tx:
            assert await tx.job_get(JobGet(job_id=job.id)) is not None
    finally:
        await adapter.close()
        await pool.close()


@pytest.mark.pg_connections(6)
def test_a_sync_transaction_begins_after_the_server_dropped_every_pooled_connection(
    postgres_url: str, schema_name: str
) -> None:
    name = f"jc_{uuid.uuid4().hex[:12]}"
    migrator = SyncPostgresStateAdapter.open_sync(
        postgres_url, StateOptions(schema=schema_name, pool_min_size=0)
    )
    drive(migrator.migrate())
    drive(migrator.close())
    gate = SecondDeadConnection()
    pool: ConnectionPool[Any] = ConnectionPool(
        make_conninfo(conninfo(postgres_url), application_name=name),
        min_size=2,
        max_size=2,
        kwargs={"autocommit": True},
        configure=gate.configure_sync,
        open=False,
    )
    gate.pool = pool
    pool.open(wait=False)
    adapter = SyncPostgresStateAdapter.from_sync_pool(pool, StateOptions(schema=schema_name))
    try:
        deadline = time.monotonic() + 10
        while not gate.opened_both():
            assert time.monotonic() < deadline, "the pool never opened its two connections"
            time.sleep(0.01)
        assert terminate(postgres_url, name) == 2
        # The synchronous adapter sends BEGIN as the transaction opens.
        job = new_job()
        transaction = adapter.transaction()
        tx = drive(transaction.__aenter__())
        try:
            drive(tx.jobs_create(JobsCreate(jobs=[job], now=NOW)))
        except BaseException as error:
            drive(transaction.__aexit__(type(error), error, error.__traceback__))
            raise
        drive(transaction.__aexit__(None, None, None))
        read = adapter.transaction(read_only=True)
        tx = drive(read.__aenter__())
        found = drive(tx.job_get(JobGet(job_id=job.id)))
        drive(read.__aexit__(None, None, None))
        assert found is not None, "the transaction did not commit"
    finally:
        drive(adapter.close())
        pool.close()


async def test_a_connection_lost_mid_transaction_is_a_transient_error(
    postgres_url: str, schema_name: str
) -> None:
    name = f"jc_{uuid.uuid4().hex[:12]}"
    await (await open_state(postgres_url, schema_name)).close()
    url = with_query(postgres_url, schema=schema_name, application_name=name)
    adapter = await PostgresStateAdapter.open(url, StateOptions(pool_min_size=0))
    job = new_job()

    async def create_then_lose_the_connection() -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
            terminate(postgres_url, name)
            await tx.job_get(JobGet(job_id=job.id))

    try:
        with pytest.raises(TransientStateError):
            await create_then_lose_the_connection()
        async with adapter.transaction(read_only=True) as tx:
            assert await tx.job_get(JobGet(job_id=job.id)) is None, "the lost transaction committed"
    finally:
        await adapter.close()


@dataclass
class Num:
    n: int


@pytest.mark.pg_connections(10)  # measured 9: two workers' pools and the client's
@pytest.mark.parametrize("mode", ["atomic", "staged"])
async def test_workers_recover_from_dropped_connections_and_complete_every_job_once(
    postgres_url: str, schema_name: str, mode: str
) -> None:
    name = f"jc_{uuid.uuid4().hex[:12]}"
    await (await open_state(postgres_url, schema_name)).close()
    url = with_query(postgres_url, schema=schema_name, application_name=name)
    state = await PostgresStateAdapter.open(url, StateOptions(pool_min_size=0))
    types = JobTypes()
    work = types.define("work", input=Num, output=Num, entry=True)
    procs = Processors()
    calls: dict[int, int] = {}
    killed = asyncio.Event()

    @procs.handler(work)
    async def handle(attempt: Attempt[Num, Num]) -> Completed:
        n = attempt.input.n
        calls[n] = calls.get(n, 0) + 1
        # Atomic: the claiming transaction stays open through the handler and the completion;
        # staged: the claim commits first and the completion opens a new transaction.
        await attempt.prepare("atomic" if mode == "atomic" else "staged")
        if n == 3 and not killed.is_set():
            killed.set()
            # Every connection of the adapter dies, as if the server restarted now.
            await asyncio.to_thread(terminate, postgres_url, name)
        return await attempt.complete(Num(n=n * 10))

    client = Client(state, None, types)
    # The test reads through its own adapter: only the worker's connections are killed.
    observer = Client(await open_state(postgres_url, schema_name), None, types)
    try:
        async with client.transaction() as tx:
            started = [await client.start_chain(tx, work, Num(n=i)) for i in range(6)]
        worker = Worker(
            client,
            procs,
            concurrency=2,
            poll_interval=0.05,
            retry=Backoff(initial=timedelta(0), maximum=timedelta(0)),
            recovery=Backoff(initial=timedelta(milliseconds=10), maximum=timedelta(milliseconds=100)),
            lease=LeaseConfig(duration=timedelta(seconds=1), renew_every=timedelta(milliseconds=200)),
        )
        async with worker:
            done = [await observer.await_chain(s.chain.id, timeout=20, poll_interval=0.05) for s in started]
    finally:
        await client.close()
        await observer.close()
    assert killed.is_set()
    assert [c.output for c in done] == [{"n": i * 10} for i in range(6)]
    assert all(c.last.status is JobStatus.COMPLETED for c in done)
    # Every job ran to one committed completion; attempts whose connection died ran again.
    assert all(calls[i] >= 1 for i in range(6))
    if mode == "atomic":
        # Its open transaction died with the connection: the claim rolled back, the job ran again.
        assert calls[3] >= 2, "the attempt on the killed connection must have been run again"


# ---------------------------------------------------------------- LISTEN connection


@pytest.fixture
async def notify(postgres_url: str, channel_prefix: str) -> AsyncIterator[PostgresNotifyAdapter]:
    adapter = await PostgresNotifyAdapter.open(
        postgres_url, NotifyOptions(channel_prefix=channel_prefix, reconnect_initial=0.05)
    )
    yield adapter
    await adapter.close()


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Re-check ``predicate`` every 20 ms (state changes on another connection); fail after 10 s."""
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 -- the condition is set by a background reader, not an event
            await asyncio.sleep(0.02)


async def test_listen_connection_killed_by_the_server_reconnects_and_delivers(
    notify: PostgresNotifyAdapter, postgres_url: str
) -> None:
    received: list[str] = []
    await notify.listen_chain_completed("chain-1", received.append)
    pid = notify.listen_backend_pid
    assert pid is not None
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute("SELECT pg_terminate_backend(%s)", [pid])
    await wait_until(lambda: notify.reconnects >= 1 and notify.listen_backend_pid not in (None, pid))
    await notify.publish_chain_completed("chain-1")
    await wait_until(lambda: received == ["chain-1"])


async def test_publishing_survives_a_dropped_publishing_connection(
    notify: PostgresNotifyAdapter, postgres_url: str
) -> None:
    received: list[str] = []
    await notify.listen_job_ownership_lost("job-1", received.append)
    await notify.publish_job_ownership_lost("job-0")
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        # Kill every other connection except the LISTEN one: the publisher among them.
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE %s AND pid <> %s",
            ["%notify_publish%", notify.listen_backend_pid],
        )
    await notify.publish_job_ownership_lost("job-1")
    await wait_until(lambda: received == ["job-1"])


async def test_healthy_delivery_passes_the_self_check(notify: PostgresNotifyAdapter) -> None:
    await notify.listen_job_scheduled(["t"], lambda _name: None)
    assert await notify.check_delivery() is True
    assert notify.degraded is False


async def test_failed_self_check_warns_once_and_reports_degraded(
    postgres_url: str, channel_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # LISTEN on another database than the one notifications are published to: like a
    # transaction-pooling proxy, nothing published ever arrives.
    other_db = conninfo(postgres_url.rsplit("/", 1)[0] + "/postgres")
    adapter = PostgresNotifyAdapter(
        conninfo(postgres_url),
        NotifyOptions(channel_prefix=channel_prefix, probe_timeout=0.3),
        listen_conninfo=other_db,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="jobchain_postgres.notify"):
            await adapter.listen_job_scheduled(["t"], lambda _name: None)
            await wait_until(lambda: adapter.degraded)
            assert await adapter.check_delivery() is False
        warnings = [r for r in caplog.records if "self-check failed" in r.getMessage()]
        assert len(warnings) == 1
        assert "polling" in warnings[0].getMessage()
    finally:
        await adapter.close()
