"""The worker registry on PostgreSQL: worker_heartbeat and workers_list, the rescue columns,
per-type leases in both claim modes, and what only a real server shows (row locks between
concurrent heartbeats, one statement per operation, index use, upgrading a schema at 0004).

The generic guarantees are in the conformance suites (state_workers, state_rescue); these tests
pin down how this adapter provides them. Every case injects ``now``; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import (
    JobGet,
    JobRenewLease,
    JobsAcquire,
    JobsCreate,
    JobsReapExpired,
    NewJob,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import Job, JobStatus, WorkerInfo, WorkerState, new_id
from jobchain.errors import InvalidArgumentError, JobTakenByAnotherWorkerError, SchemaNotMigratedError
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres._tx import PostgresStateTx
from jobchain_postgres._workers import _heartbeat_params
from jobchain_postgres.options import Claim
from jobchain_postgres.queries import Queries, migration, migration_names

from .conftest import conninfo, open_state
from .test_statements import CountingCursor, until_lock_wait

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ALIVE = timedelta(seconds=10)
LEASE = timedelta(seconds=30)
DEAD_AT = NOW + ALIVE + timedelta(seconds=5)
"""A moment when a worker that last beat at NOW (and not since) is dead."""


def beat(worker_id: str, *, now: datetime = NOW, **fields: Any) -> WorkerHeartbeat:
    values: dict[str, Any] = {
        "name": f"name-{worker_id}",
        "host": "host-1",
        "pid": 4242,
        "version": "1.0.0",
        "type_names": ["t"],
        "concurrency": 4,
        "inflight": 0,
        "state": WorkerState.RUNNING,
        "alive_for": ALIVE,
    }
    values.update(fields)
    return WorkerHeartbeat(worker_id=worker_id, now=now, **values)


async def heartbeat(adapter: PostgresStateAdapter, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
    async with adapter.transaction() as tx:
        return await tx.worker_heartbeat(params)


async def workers(
    adapter: PostgresStateAdapter, *, now: datetime, states: list[str] | None = None
) -> dict[str, WorkerInfo]:
    async with adapter.transaction(read_only=True) as tx:
        rows = await tx.workers_list(WorkersList(states=states or [], now=now))
    return {row.id: row for row in rows}


async def start(adapter: PostgresStateAdapter, *type_names: str) -> list[str]:
    jobs = [NewJob(id=new_id(), type_name=name, chain_type_name=name) for name in type_names]
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW))
    return [job.id for job in jobs]


async def claim(
    adapter: PostgresStateAdapter, worker_id: str, type_name: str = "t", limit: int = 1, now: datetime = NOW
) -> list[Job]:
    async with adapter.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=[type_name], worker_id=worker_id, lease_for=LEASE, limit=limit, now=now)
        )
    return acquired.jobs


async def running_jobs_of(adapter: PostgresStateAdapter, worker_id: str, count: int) -> list[Job]:
    """``worker_id`` registers at NOW and claims ``count`` new jobs."""
    await heartbeat(adapter, beat(worker_id))
    await start(adapter, *["t"] * count)
    jobs = await claim(adapter, worker_id, limit=count)
    assert len(jobs) == count
    return jobs


async def job(adapter: PostgresStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        found = await tx.job_get(JobGet(job_id=job_id))
    assert found is not None
    return found


def dead_text(worker_id: str) -> str:
    return f"attempt abandoned: worker {worker_id} stopped heartbeating and was presumed dead"


# ---------------------------------------------------------------- heartbeat and listing


async def test_a_later_heartbeat_keeps_started_at_and_updates_the_rest(
    pg_state: PostgresStateAdapter,
) -> None:
    await heartbeat(pg_state, beat("a"))
    later = NOW + timedelta(seconds=3)
    await heartbeat(
        pg_state,
        beat("a", now=later, inflight=3, type_names=["t", "u"], state=WorkerState.DRAINING, version="1.1"),
    )
    row = (await workers(pg_state, now=later))["a"]
    assert (row.started_at, row.last_seen_at, row.alive_until) == (NOW, later, later + ALIVE)
    assert (row.inflight, row.type_names, row.state, row.version) == (
        3,
        ("t", "u"),
        WorkerState.DRAINING,
        "1.1",
    )
    assert (row.name, row.host, row.pid, row.concurrency) == ("name-a", "host-1", 4242, 4)


async def test_workers_list_reports_a_lapsed_worker_dead_and_filters_on_that(
    pg_state: PostgresStateAdapter,
) -> None:
    await heartbeat(pg_state, beat("lapsed"))
    await heartbeat(pg_state, beat("stopped", state=WorkerState.STOPPED))
    await heartbeat(pg_state, beat("live", now=NOW + timedelta(seconds=1), alive_for=timedelta(minutes=5)))
    listed = await workers(pg_state, now=DEAD_AT)
    assert list(listed) == ["live", "lapsed", "stopped"]  # most recently started first, then id
    assert {k: v.state for k, v in listed.items()} == {
        "live": WorkerState.RUNNING,
        "lapsed": WorkerState.DEAD,
        "stopped": WorkerState.STOPPED,
    }
    assert list(await workers(pg_state, now=DEAD_AT, states=["dead", "stopped"])) == ["lapsed", "stopped"]
    assert list(await workers(pg_state, now=NOW, states=["dead"])) == []


# ---------------------------------------------------------------- dead workers and their jobs


async def test_a_dead_workers_jobs_return_to_pending_and_no_one_elses(pg_state: PostgresStateAdapter) -> None:
    dead_jobs = await running_jobs_of(pg_state, "dead", 2)
    [stopped_job] = await running_jobs_of(pg_state, "stopped", 1)
    await heartbeat(pg_state, beat("stopped", state=WorkerState.STOPPED))
    [live_job] = await running_jobs_of(pg_state, "live", 1)
    await heartbeat(pg_state, beat("live", now=DEAD_AT - timedelta(seconds=1)))

    result = await heartbeat(pg_state, beat("caller", now=DEAD_AT, release_dead=True))

    assert result.dead_worker_ids == ["dead"]
    assert sorted(j.id for j in result.released_jobs) == sorted(j.id for j in dead_jobs)
    for released in result.released_jobs:
        assert released == await job(pg_state, released.id)  # what was returned is what is stored
        assert (released.status, released.leased_by, released.leased_until) == (JobStatus.PENDING, None, None)
        assert (released.rescued_at, released.rescued_from, released.rescue_reason) == (
            DEAD_AT,
            "dead",
            "worker_dead",
        )
        assert released.last_attempt_error == dead_text("dead")
        assert (released.attempt, released.lease_generation) == (1, 1)
    for untouched in (stopped_job, live_job):
        assert await job(pg_state, untouched.id) == untouched
    states = {k: v.state for k, v in (await workers(pg_state, now=DEAD_AT)).items()}
    assert states == {
        "dead": WorkerState.DEAD,
        "stopped": WorkerState.STOPPED,
        "live": WorkerState.RUNNING,
        "caller": WorkerState.RUNNING,
    }


async def test_without_release_dead_nothing_is_marked_or_released(pg_state: PostgresStateAdapter) -> None:
    [running] = await running_jobs_of(pg_state, "dead", 1)
    result = await heartbeat(pg_state, beat("caller", now=DEAD_AT))
    assert (result.dead_worker_ids, result.released_jobs) == ([], [])
    assert await job(pg_state, running.id) == running
    async with pg_state.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            sql.SQL("SELECT state FROM {} WHERE id = 'dead'").format(
                sql.Identifier(pg_state.options.schema, "jobchain_worker")
            )
        )
        assert await cursor.fetchall() == [("running",)]  # stored as it said; listed as dead


async def test_a_worker_marked_dead_learns_it_and_its_attempt_is_fenced(
    pg_state: PostgresStateAdapter,
) -> None:
    [running] = await running_jobs_of(pg_state, "slow", 1)
    await heartbeat(pg_state, beat("caller", now=DEAD_AT, release_dead=True))
    back = await heartbeat(pg_state, beat("slow", now=DEAD_AT + timedelta(seconds=1)))
    # Fenced (issue 35): the same incarnation keeps the row dead; the next one rejoins.
    assert (await workers(pg_state, now=DEAD_AT + timedelta(seconds=1)))["slow"].state is WorkerState.DEAD
    rejoined = await heartbeat(pg_state, beat("slow", now=DEAD_AT + timedelta(seconds=2), incarnation=1))
    again = await heartbeat(pg_state, beat("slow", now=DEAD_AT + timedelta(seconds=3), incarnation=1))
    assert (back.was_dead, rejoined.was_dead, again.was_dead) == (True, False, False)
    row = (await workers(pg_state, now=DEAD_AT + timedelta(seconds=3)))["slow"]
    assert (row.state, row.started_at) == (WorkerState.RUNNING, NOW)
    with pytest.raises(JobTakenByAnotherWorkerError):
        async with pg_state.transaction() as tx:
            await tx.job_renew_lease(
                JobRenewLease(job_id=running.id, worker_id="slow", lease_for=LEASE, now=DEAD_AT)
            )


async def test_a_heartbeat_skips_a_dead_worker_another_open_transaction_is_releasing(
    pg_state: PostgresStateAdapter,
) -> None:
    jobs = await running_jobs_of(pg_state, "dead", 2)
    async with asyncio.timeout(10):
        async with pg_state.transaction() as first:
            mine = await first.worker_heartbeat(beat("a", now=DEAD_AT, release_dead=True))
            theirs = await heartbeat(pg_state, beat("b", now=DEAD_AT, release_dead=True))
        after = await heartbeat(pg_state, beat("c", now=DEAD_AT, release_dead=True))
    assert sorted(j.id for j in mine.released_jobs) == sorted(j.id for j in jobs)
    assert (theirs.dead_worker_ids, theirs.released_jobs) == ([], [])
    assert (after.dead_worker_ids, after.released_jobs) == ([], [])


async def test_a_heartbeat_that_waited_for_its_own_row_rechecks_what_it_found_dead(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    # B's heartbeat takes its snapshot, then waits for its own row (held below). Meanwhile A's
    # heartbeat marks the dead worker and releases its jobs. B then finds the worker's row and
    # jobs changed since its snapshot: the lock recheck sees them dead and pending, and B takes
    # nothing. (Had B locked the dead worker before waiting, A would have skipped it.)
    jobs = await running_jobs_of(pg_state, "dead", 2)
    await heartbeat(pg_state, beat("b"))
    connection = await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True)
    b_adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    try:
        async with pg_state.transaction() as holder:
            await holder.connection.execute(
                sql.SQL("SELECT 1 FROM {} WHERE id = 'b' FOR UPDATE").format(
                    sql.Identifier(schema_name, "jobchain_worker")
                )
            )
            waiting = asyncio.create_task(heartbeat(b_adapter, beat("b", now=DEAD_AT, release_dead=True)))
            await until_lock_wait(
                postgres_url,
                connection.info.backend_pid,
                waiting,
                "B's heartbeat did not wait for its own row",
            )
            mine = await heartbeat(pg_state, beat("a", now=DEAD_AT, release_dead=True))
        theirs = await asyncio.wait_for(waiting, 10)
    finally:
        await b_adapter.close()
        await connection.close()
    assert sorted(j.id for j in mine.released_jobs) == sorted(j.id for j in jobs)
    assert mine.dead_worker_ids == ["dead"]
    assert (theirs.dead_worker_ids, theirs.released_jobs) == ([], [])


async def test_concurrent_heartbeats_never_release_one_dead_worker_twice(
    postgres_url: str, schema_name: str
) -> None:
    first = await open_state(postgres_url, schema_name)
    second = await open_state(postgres_url, schema_name)
    try:
        for round_ in range(10):
            base = NOW + timedelta(minutes=round_)
            dead = [f"dead-{round_}-{n}" for n in range(3)]
            expected: list[str] = []
            for worker_id in dead:
                await heartbeat(first, beat(worker_id, now=base))
                await start(first, "t", "t")
                expected += [j.id for j in await claim(first, worker_id, limit=2, now=base)]
            at = base + ALIVE + timedelta(seconds=5)
            results = await asyncio.wait_for(
                asyncio.gather(
                    heartbeat(first, beat("a", now=at, release_dead=True, alive_for=timedelta(hours=9))),
                    heartbeat(second, beat("b", now=at, release_dead=True, alive_for=timedelta(hours=9))),
                ),
                30,
            )
            released = [j.id for r in results for j in r.released_jobs]
            marked = [w for r in results for w in r.dead_worker_ids]
            assert sorted(released) == sorted(expected), round_
            assert sorted(marked) == sorted(dead), round_
    finally:
        await first.close()
        await second.close()


# ---------------------------------------------------------------- prune and next lease expiry


async def test_prune_deletes_long_lapsed_rows_after_releasing_their_jobs(
    pg_state: PostgresStateAdapter,
) -> None:
    prune_after = timedelta(minutes=30)
    [running] = await running_jobs_of(pg_state, "gone", 1)
    await heartbeat(pg_state, beat("stopped", state=WorkerState.STOPPED))
    await heartbeat(pg_state, beat("recent", now=NOW + timedelta(minutes=45)))  # lapsed 15 min
    late = NOW + timedelta(hours=1)
    first = await heartbeat(pg_state, beat("caller", now=late, release_dead=True, prune_after=prune_after))
    # The lapsed running worker is marked dead (its job released) before it is pruned.
    assert ([j.id for j in first.released_jobs], first.dead_worker_ids) == ([running.id], ["gone", "recent"])
    assert sorted(await workers(pg_state, now=late)) == ["caller", "gone", "recent"]
    await heartbeat(pg_state, beat("caller", now=late, release_dead=True, prune_after=prune_after))
    assert sorted(await workers(pg_state, now=late)) == ["caller", "recent"]


async def test_next_lease_expiry_counts_other_workers_leases_of_the_heartbeats_types(
    pg_state: PostgresStateAdapter,
) -> None:
    assert (await heartbeat(pg_state, beat("me"))).next_lease_expiry is None
    await start(pg_state, "t", "t", "u")
    await claim(pg_state, "me", now=NOW)  # own lease: ignored
    await claim(pg_state, "other", now=NOW + timedelta(seconds=4))  # until NOW + 34 s
    await claim(pg_state, "other", "u", now=NOW)  # type u: not served by this heartbeat
    result = await heartbeat(pg_state, beat("me", now=NOW + timedelta(seconds=10)))
    assert result.next_lease_expiry == timedelta(seconds=24)
    expired = await heartbeat(pg_state, beat("me", now=NOW + timedelta(minutes=5)))
    assert expired.next_lease_expiry == timedelta(0)


async def test_next_lease_expiry_leaves_out_the_jobs_it_just_released(pg_state: PostgresStateAdapter) -> None:
    await running_jobs_of(pg_state, "dead", 1)
    result = await heartbeat(pg_state, beat("me", now=DEAD_AT, release_dead=True))
    assert len(result.released_jobs) == 1
    assert result.next_lease_expiry is None


# ---------------------------------------------------------------- leases and reaps in both claim modes


@pytest.fixture(params=["skip-locked", "atomic-update"])
async def any_claim(
    request: pytest.FixtureRequest, postgres_url: str, schema_name: str
) -> AsyncIterator[PostgresStateAdapter]:
    claim_mode: Claim = request.param
    adapter = await open_state(postgres_url, schema_name, claim_mode)
    yield adapter
    await adapter.close()


async def test_one_claim_gives_each_type_its_own_lease(any_claim: PostgresStateAdapter) -> None:
    await start(any_claim, "short", "long", "plain")
    async with any_claim.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(
                type_names=["short", "long", "plain"],
                worker_id="w",
                lease_for=LEASE,
                type_leases={"short": timedelta(seconds=5), "long": timedelta(minutes=10)},
                limit=3,
                now=NOW,
            )
        )
    until = {j.type_name: j.leased_until for j in acquired.jobs}
    assert until == {
        "short": NOW + timedelta(seconds=5),
        "long": NOW + timedelta(minutes=10),
        "plain": NOW + LEASE,
    }


async def test_a_reap_records_the_rescue_in_both_claim_modes(any_claim: PostgresStateAdapter) -> None:
    await start(any_claim, "t")
    [running] = await claim(any_claim, "w")
    late = NOW + LEASE + timedelta(seconds=1)
    async with any_claim.transaction() as tx:
        [reaped] = await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=late))
    assert reaped.id == running.id
    assert (reaped.status, reaped.leased_by, reaped.leased_until) == (JobStatus.PENDING, None, None)
    assert (reaped.rescued_at, reaped.rescued_from, reaped.rescue_reason) == (late, "w", "lease_expired")
    assert reaped.last_attempt_error == "attempt abandoned: the lease held by worker w expired"
    assert await job(any_claim, running.id) == reaped


# ---------------------------------------------------------------- statements, plans, input, upgrades


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


async def test_heartbeat_and_listing_send_one_statement_each(counted: PostgresStateAdapter) -> None:
    await running_jobs_of(counted, "dead", 2)

    async def heartbeat_op(tx: PostgresStateTx) -> object:
        params = beat("me", now=DEAD_AT, release_dead=True, incarnation=1)
        return (await tx.worker_heartbeat(params)).released_jobs

    async def list_op(tx: PostgresStateTx) -> object:
        return await tx.workers_list(WorkersList(states=["dead"], now=DEAD_AT))

    async def fenced_op(tx: PostgresStateTx) -> object:
        # A late heartbeat of an earlier incarnation (issue 35): fenced in the same statement.
        late = beat("me", now=DEAD_AT, release_dead=True, incarnation=0)
        return (await tx.worker_heartbeat(late)).was_dead

    async with counted.transaction() as tx:
        await tx.worker_heartbeat(beat("me", now=NOW, incarnation=1))
    operations: list[tuple[str, Callable[[PostgresStateTx], Awaitable[object]]]] = [
        ("worker_heartbeat", fenced_op),
        ("worker_heartbeat", heartbeat_op),
        ("workers_list", list_op),
    ]
    for name, op in operations:
        async with counted.transaction() as tx:
            CountingCursor.sent.clear()
            result = await op(tx)
            sent = [s.decode().splitlines()[0] for s in CountingCursor.sent]
        assert result
        assert len(sent) == 1, sent
        assert sent[0].startswith(f"-- {name}:"), sent


async def test_the_dead_scan_and_the_next_expiry_use_their_indexes(pg_state: PostgresStateAdapter) -> None:
    for n in range(40):
        await heartbeat(pg_state, beat(f"w{n}"))
    await start(pg_state, *[f"t{n % 4}" for n in range(400)])
    for n in range(4):
        await claim(pg_state, f"w{n}", f"t{n}", limit=20)
    schema = pg_state.options.schema
    params = _heartbeat_params(beat("w1", now=DEAD_AT, release_dead=True, type_names=["t1", "t2"]))
    async with pg_state.transaction() as tx:
        for table in ("jobchain_job", "jobchain_worker"):
            await tx.connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))
        await tx.connection.execute("SET LOCAL enable_seqscan = off")
        cursor = tx.connection.cursor()
        await cursor.execute(
            b"EXPLAIN " + Queries(schema, "jobchain_").worker_heartbeat, params, prepare=False
        )
        lines = [row[0].strip() for row in await cursor.fetchall()]
    text = "\n".join(lines)
    # The dead scan: workers still claiming to be alive, off their partial index.
    dead_scan = lines[lines.index("CTE dead") : lines.index("CTE marked")]
    assert any("Index Scan on jobchain_worker_alive_idx" in line for line in dead_scan) or any(
        "Index Scan using jobchain_worker_alive_idx" in line for line in dead_scan
    ), text
    # The next expiry: one probe of the expired-lease index per type.
    probes = [
        n
        for n, line in enumerate(lines)
        if line.startswith("->  Index Scan using jobchain_job_expired_lease_idx")
        and lines[n + 1] == "Index Cond: (type_name = t.type_name)"
    ]
    assert probes, text
    # The dead workers' running jobs come off the same partial index, never the whole table.
    assert "Seq Scan on jobchain_job" not in text, text


async def test_bad_heartbeat_input_is_refused_before_any_sql(pg_state: PostgresStateAdapter) -> None:
    async with pg_state.transaction() as tx:
        for bad in ({"pid": -1}, {"inflight": -2}, {"concurrency": 2**40}, {"pid": True}):
            with pytest.raises(InvalidArgumentError):
                await tx.worker_heartbeat(beat("me", **bad))
        for incarnation in (-1, True, 2**63, 1.0):  # refused by WorkerHeartbeat itself
            with pytest.raises(InvalidArgumentError, match="incarnation"):
                beat("me", incarnation=incarnation)
        with pytest.raises(InvalidArgumentError, match="timezone-aware"):
            await tx.worker_heartbeat(beat("me", now=datetime(2030, 1, 1)))
        assert not tx.poisoned
        await tx.worker_heartbeat(beat("me"))
    async with pg_state.transaction(read_only=True) as tx:
        with pytest.raises(InvalidArgumentError, match="read-only"):
            await tx.worker_heartbeat(beat("me"))
        assert [w.id for w in await tx.workers_list(WorkersList(now=NOW))] == ["me"]


async def _schema_at_0004(url: str, schema: str) -> tuple[str, str]:
    """A schema migrated up to 0004 holding a pending and a running job: (pending id, running id)."""
    queries = Queries(schema, "jobchain_")
    pending, running = new_id(), new_id()
    insert = sql.SQL(
        "INSERT INTO {} (id, chain_id, type_name, chain_type_name, chain_index, status, created_at,"
        " scheduled_at, attempt, leased_by, leased_until, lease_generation) VALUES"
        " (%(p)s, %(p)s, 't', 't', 0, 'pending', %(at)s, %(at)s, 0, NULL, NULL, 0),"
        " (%(r)s, %(r)s, 't', 't', 0, 'running', %(at)s, %(at)s, 1, 'old-worker', %(until)s, 1)"
    ).format(sql.Identifier(schema, "jobchain_job"))
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as connection:
        await connection.execute(queries.migration_bootstrap)
        for name in migration_names():
            if name < "0005":
                await connection.execute(migration(name, schema, "jobchain_"))
                await connection.execute(queries.migration_record, {"name": name})
        await connection.execute(insert, {"p": pending, "r": running, "at": NOW, "until": NOW + LEASE})
    return pending, running


async def test_a_schema_at_0004_upgrades_and_its_jobs_read_back_with_no_rescue(
    postgres_url: str, schema_name: str
) -> None:
    pending, running = await _schema_at_0004(postgres_url, schema_name)
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        # Before the upgrade: jobs still read (no rescue recorded); the registry does not exist yet.
        assert (await job(adapter, running)).rescued_at is None
        with pytest.raises(SchemaNotMigratedError, match="jobchain migrate"):
            await heartbeat(adapter, beat("me"))
        with pytest.raises(SchemaNotMigratedError, match="older than this library"):
            async with adapter.transaction() as tx:
                await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=NOW + 2 * LEASE))
        await adapter.migrate()
        for job_id in (pending, running):
            old = await job(adapter, job_id)
            assert (old.rescued_at, old.rescued_from, old.rescue_reason) == (None, None, None)
        assert (await job(adapter, running)).leased_by == "old-worker"
        async with adapter.transaction() as tx:
            [reaped] = await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=NOW + 2 * LEASE))
        assert (reaped.id, reaped.rescued_from, reaped.rescue_reason) == (
            running,
            "old-worker",
            "lease_expired",
        )
        assert (await heartbeat(adapter, beat("me"))).was_dead is False
    finally:
        await adapter.close()
