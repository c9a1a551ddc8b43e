"""The SQLite worker registry: heartbeats, dead-worker rescue, prune, per-type leases, reap
records, and the upgrade of a database migrated before the registry existed."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from jobchain.contracts import (
    JobComplete,
    JobGet,
    JobsAcquire,
    JobsCreate,
    JobsReapExpired,
    NewJob,
    StateAdapter,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import Job, JobStatus, RescueReason, WorkerInfo, WorkerState, new_id
from jobchain.errors import InvalidArgumentError, JobTakenByAnotherWorkerError
from jobchain.errors import SchemaNotMigratedError as CoreSchemaNotMigratedError
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import migration_statements, queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
ALIVE = timedelta(seconds=30)
LEASE = timedelta(minutes=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def beat(worker_id: str, now: datetime, **changes: Any) -> WorkerHeartbeat:
    fields: dict[str, Any] = {
        "worker_id": worker_id,
        "name": f"name-{worker_id}",
        "host": "host-1",
        "pid": 100,
        "version": "1.0",
        "type_names": ["a", "b"],
        "concurrency": 4,
        "inflight": 0,
        "state": WorkerState.RUNNING,
        "alive_for": ALIVE,
        "now": now,
    }
    return WorkerHeartbeat(**(fields | changes))


async def heartbeat(
    adapter: StateAdapter, worker_id: str, now: datetime, **changes: Any
) -> WorkerHeartbeatResult:
    async with adapter.transaction() as tx:
        return await tx.worker_heartbeat(beat(worker_id, now, **changes))


async def workers(adapter: StateAdapter, now: datetime, *states: str) -> list[WorkerInfo]:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.workers_list(WorkersList(states=states, now=now))


async def create(adapter: StateAdapter, type_name: str, now: datetime = T0) -> str:
    job_id = new_id()
    async with adapter.transaction() as tx:
        await tx.jobs_create(
            JobsCreate(jobs=[NewJob(id=job_id, type_name=type_name, chain_type_name=type_name)], now=now)
        )
    return job_id


async def claim(
    adapter: StateAdapter, worker_id: str, type_name: str, now: datetime = T0, lease: timedelta = LEASE
) -> Job:
    """Create a job of ``type_name`` and have ``worker_id`` claim it."""
    job_id = await create(adapter, type_name, now)
    async with adapter.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=[type_name], worker_id=worker_id, lease_for=lease, now=now)
        )
    [job] = acquired.jobs
    assert job.id == job_id
    return job


async def get(adapter: StateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        job = await tx.job_get(JobGet(job_id=job_id))
    assert job is not None
    return job


class TestUpsert:
    async def test_first_heartbeat_inserts_the_row_as_reported(self, adapter: SqliteStateAdapter) -> None:
        result = await heartbeat(adapter, "w1", T0, inflight=2, state=WorkerState.DRAINING)
        assert result == WorkerHeartbeatResult()
        [row] = await workers(adapter, T0)
        assert row == WorkerInfo(
            id="w1",
            name="name-w1",
            host="host-1",
            pid=100,
            version="1.0",
            type_names=("a", "b"),
            concurrency=4,
            inflight=2,
            state=WorkerState.DRAINING,
            started_at=T0,
            last_seen_at=T0,
            alive_until=T0 + ALIVE,
        )

    async def test_later_heartbeats_keep_started_at_and_replace_everything_else(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "w1", T0)
        await heartbeat(
            adapter,
            "w1",
            at(10),
            name="renamed",
            host="host-2",
            pid=200,
            version="2.0",
            type_names=["c"],
            concurrency=8,
            inflight=3,
            state=WorkerState.STOPPED,
            alive_for=timedelta(seconds=5),
        )
        [row] = await workers(adapter, at(10))
        assert (row.started_at, row.last_seen_at, row.alive_until) == (T0, at(10), at(15))
        assert (row.name, row.host, row.pid, row.version) == ("renamed", "host-2", 200, "2.0")
        assert (row.type_names, row.concurrency, row.inflight, row.state) == (
            ("c",),
            8,
            3,
            WorkerState.STOPPED,
        )

    async def test_heartbeat_in_a_read_only_transaction_is_refused(self, adapter: SqliteStateAdapter) -> None:
        async with adapter.transaction(read_only=True) as tx:
            with pytest.raises(InvalidArgumentError, match="read-only"):
                await tx.worker_heartbeat(beat("w1", T0))
        assert await workers(adapter, T0) == []

    async def test_a_rolled_back_heartbeat_leaves_no_row(self, adapter: SqliteStateAdapter) -> None:
        async def beat_then_fail() -> None:
            async with adapter.transaction() as tx:
                await tx.worker_heartbeat(beat("w1", T0))
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            await beat_then_fail()
        assert await workers(adapter, T0) == []


class TestDeadWorkers:
    async def test_release_marks_lapsed_running_and_draining_workers_dead_and_returns_their_jobs(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "live", T0, alive_for=timedelta(minutes=5))
        await heartbeat(adapter, "lapsed", T0)
        await heartbeat(adapter, "draining", T0, state=WorkerState.DRAINING)
        await heartbeat(adapter, "stopped", T0, state=WorkerState.STOPPED)
        live_job = await claim(adapter, "live", "a")
        lapsed_jobs = [await claim(adapter, "lapsed", "a"), await claim(adapter, "lapsed", "b")]
        draining_job = await claim(adapter, "draining", "b")
        stopped_job = await claim(adapter, "stopped", "a")
        unregistered_job = await claim(adapter, "never-registered", "a")

        now = at(31)
        result = await heartbeat(adapter, "rescuer", now, release_dead=True)

        assert result.dead_worker_ids == ["draining", "lapsed"]
        assert not result.was_dead
        expected_ids = sorted([*lapsed_jobs, draining_job], key=lambda job: (job.created_at, job.id))
        assert [job.id for job in result.released_jobs] == [job.id for job in expected_ids]
        for job in result.released_jobs:
            assert job == await get(adapter, job.id)
            assert job.status is JobStatus.PENDING
            assert (job.leased_by, job.leased_until) == (None, None)
            assert job.rescued_at == now
            assert job.rescue_reason == RescueReason.WORKER_DEAD.value
            assert job.rescued_from in ("lapsed", "draining")
            assert job.last_attempt_error == (
                f"attempt abandoned: worker {job.rescued_from} stopped heartbeating and was presumed dead"
            )
            assert job.attempt == 1
        for untouched in (live_job, stopped_job, unregistered_job):
            assert await get(adapter, untouched.id) == untouched
        states = {row.id: row.state for row in await workers(adapter, now)}
        assert states == {
            "live": WorkerState.RUNNING,
            "lapsed": WorkerState.DEAD,
            "draining": WorkerState.DEAD,
            "stopped": WorkerState.STOPPED,
            "rescuer": WorkerState.RUNNING,
        }

    async def test_a_worker_exactly_at_alive_until_is_not_dead(self, adapter: SqliteStateAdapter) -> None:
        await heartbeat(adapter, "w1", T0)
        job = await claim(adapter, "w1", "a")
        result = await heartbeat(adapter, "rescuer", T0 + ALIVE, release_dead=True)
        assert (result.dead_worker_ids, result.released_jobs) == ([], [])
        assert await get(adapter, job.id) == job

    async def test_without_release_dead_nothing_is_marked_but_the_listing_reports_dead(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "lapsed", T0)
        job = await claim(adapter, "lapsed", "a")
        result = await heartbeat(adapter, "other", at(60))
        assert (result.dead_worker_ids, result.released_jobs) == ([], [])
        assert await get(adapter, job.id) == job
        reported = {row.id: row.state for row in await workers(adapter, at(60))}
        assert reported == {"lapsed": WorkerState.DEAD, "other": WorkerState.RUNNING}
        # Not marked in storage: its own next heartbeat does not report was_dead.
        assert not (await heartbeat(adapter, "lapsed", at(61))).was_dead

    async def test_a_worker_already_marked_dead_is_not_released_twice(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "lapsed", T0)
        await claim(adapter, "lapsed", "a")
        first = await heartbeat(adapter, "r1", at(40), release_dead=True)
        assert first.dead_worker_ids == ["lapsed"]
        second = await heartbeat(adapter, "r2", at(41), release_dead=True)
        assert (second.dead_worker_ids, second.released_jobs) == ([], [])

    async def test_the_dead_worker_learns_it_was_dead_and_its_late_completion_is_fenced(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "slow", T0)
        job = await claim(adapter, "slow", "a")
        await heartbeat(adapter, "rescuer", at(31), release_dead=True)
        async with adapter.transaction() as tx:
            retaken = await tx.jobs_acquire(
                JobsAcquire(type_names=["a"], worker_id="rescuer", lease_for=LEASE, now=at(32))
            )
        assert [j.id for j in retaken.jobs] == [job.id]
        assert retaken.jobs[0].rescued_from == "slow"  # kept by the next claim

        back = await heartbeat(adapter, "slow", at(33))
        assert back.was_dead  # fenced (issue 35): the row stays dead until a rejoin
        [row] = [row for row in await workers(adapter, at(33)) if row.id == "slow"]
        assert (row.state, row.last_seen_at) == (WorkerState.DEAD, T0)
        assert not (await heartbeat(adapter, "slow", at(34), incarnation=1)).was_dead
        [row] = [row for row in await workers(adapter, at(34)) if row.id == "slow"]
        assert (row.state, row.started_at, row.last_seen_at) == (WorkerState.RUNNING, T0, at(34))

        with pytest.raises(JobTakenByAnotherWorkerError):
            async with adapter.transaction() as tx:
                await tx.job_complete(
                    JobComplete(
                        job_id=job.id, worker_id="slow", lease_generation=job.lease_generation, now=at(35)
                    )
                )
        assert (await get(adapter, job.id)).leased_by == "rescuer"

    async def test_the_callers_own_lapsed_row_is_never_marked_dead_by_itself(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "w1", T0)
        job = await claim(adapter, "w1", "a")
        result = await heartbeat(adapter, "w1", at(60), release_dead=True)
        assert result == WorkerHeartbeatResult(next_lease_expiry=None)
        assert await get(adapter, job.id) == job


class TestPrune:
    async def test_rows_gone_longer_than_prune_after_are_deleted_whatever_their_state(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await heartbeat(adapter, "old-running", T0)  # alive_until T0+30
        await heartbeat(adapter, "old-stopped", T0, state=WorkerState.STOPPED)
        await heartbeat(adapter, "recent", at(100))  # alive_until T0+130
        # The cutoff is now - prune_after; a row exactly at it stays.
        await heartbeat(adapter, "pruner", at(131), prune_after=timedelta(seconds=101))
        assert {row.id for row in await workers(adapter, at(131))} == {
            "old-running",
            "old-stopped",
            "recent",
            "pruner",
        }
        await heartbeat(adapter, "pruner", at(131), prune_after=timedelta(seconds=100))
        assert {row.id for row in await workers(adapter, at(131))} == {"pruner", "recent"}

    async def test_a_lapsed_worker_is_released_before_it_is_pruned(self, adapter: SqliteStateAdapter) -> None:
        await heartbeat(adapter, "gone", T0)
        job = await claim(adapter, "gone", "a")
        result = await heartbeat(
            adapter, "rescuer", at(3600), release_dead=True, prune_after=timedelta(seconds=60)
        )
        assert result.dead_worker_ids == ["gone"]
        assert [j.id for j in result.released_jobs] == [job.id]
        # The heartbeat that marked it dead keeps its row (it lists as dead); the next prunes it.
        assert [row.id for row in await workers(adapter, at(3600))] == ["rescuer", "gone"]
        await heartbeat(adapter, "rescuer", at(3601), release_dead=True, prune_after=timedelta(seconds=60))
        assert [row.id for row in await workers(adapter, at(3601))] == ["rescuer"]


class TestNextLeaseExpiry:
    async def test_earliest_lease_of_the_callers_types_held_by_others(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await claim(adapter, "other", "a", lease=timedelta(seconds=50))
        await claim(adapter, "other", "b", lease=timedelta(seconds=40))
        await claim(adapter, "me", "b", lease=timedelta(seconds=5))  # own: never counted
        await claim(adapter, "other", "c", lease=timedelta(seconds=1))  # not my type
        result = await heartbeat(adapter, "me", at(10), type_names=["a", "b"])
        assert result.next_lease_expiry == timedelta(seconds=30)
        only_a = await heartbeat(adapter, "me", at(10), type_names=["a"])
        assert only_a.next_lease_expiry == timedelta(seconds=40)

    async def test_an_expired_lease_is_zero_and_none_without_any(self, adapter: SqliteStateAdapter) -> None:
        assert (await heartbeat(adapter, "me", T0)).next_lease_expiry is None
        assert (await heartbeat(adapter, "me", T0, type_names=[])).next_lease_expiry is None
        await claim(adapter, "other", "a", lease=timedelta(seconds=5))
        assert (await heartbeat(adapter, "me", at(100))).next_lease_expiry == timedelta(0)

    async def test_jobs_released_by_this_heartbeat_no_longer_count(self, adapter: SqliteStateAdapter) -> None:
        await heartbeat(adapter, "lapsed", T0)
        await claim(adapter, "lapsed", "a")
        await claim(adapter, "live", "a", lease=timedelta(minutes=10))
        result = await heartbeat(adapter, "me", at(31), release_dead=True)
        assert len(result.released_jobs) == 1
        assert result.next_lease_expiry == timedelta(minutes=10) - timedelta(seconds=31)


class TestWorkersList:
    async def test_most_recently_started_first_then_by_id(self, adapter: SqliteStateAdapter) -> None:
        for worker_id, start in (("b", 0), ("a", 5), ("c", 5), ("d", 1)):
            await heartbeat(adapter, worker_id, at(start), alive_for=timedelta(hours=1))
        assert [row.id for row in await workers(adapter, at(6))] == ["a", "c", "d", "b"]

    async def test_states_filter_on_the_reported_state(self, adapter: SqliteStateAdapter) -> None:
        await heartbeat(adapter, "lapsed", T0)
        await heartbeat(adapter, "live", at(20))
        await heartbeat(adapter, "stopped", T0, state=WorkerState.STOPPED)
        now = at(40)
        assert [row.id for row in await workers(adapter, now, "dead")] == ["lapsed"]
        assert [row.id for row in await workers(adapter, now, WorkerState.RUNNING)] == ["live"]
        assert {row.id for row in await workers(adapter, now, "stopped", "dead")} == {"lapsed", "stopped"}
        assert await workers(adapter, now, "draining") == []
        assert len(await workers(adapter, now)) == 3


class TestPerTypeLeases:
    async def test_each_claimed_type_gets_its_own_lease_in_one_claim(
        self, adapter: SqliteStateAdapter
    ) -> None:
        ids = {name: await create(adapter, name) for name in ("short", "long", "plain", 'odd."name')}
        async with adapter.transaction() as tx:
            acquired = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=list(ids),
                    worker_id="w",
                    lease_for=LEASE,
                    limit=10,
                    type_leases={
                        "short": timedelta(seconds=5),
                        "long": timedelta(hours=1),
                        'odd."name': timedelta(seconds=7),
                        "unclaimed": timedelta(seconds=1),
                    },
                    now=at(1),
                )
            )
        leases = {job.type_name: job.leased_until for job in acquired.jobs}
        assert leases == {
            "short": at(6),
            "long": at(3601),
            "plain": at(1) + LEASE,
            'odd."name': at(8),
        }
        for job in acquired.jobs:
            assert await get(adapter, job.id) == job

    async def test_a_type_lease_equal_to_the_default_changes_nothing(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await create(adapter, "a")
        async with adapter.transaction() as tx:
            acquired = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=["a"], worker_id="w", lease_for=LEASE, type_leases={"a": LEASE}, now=T0
                )
            )
        assert [job.leased_until for job in acquired.jobs] == [T0 + LEASE]


class TestReapRecordsTheRescue:
    async def test_reaped_jobs_carry_the_rescue_and_keep_it_through_the_next_attempt(
        self, adapter: SqliteStateAdapter
    ) -> None:
        job = await claim(adapter, "w1", "a", lease=timedelta(seconds=10))
        now = at(11)
        async with adapter.transaction() as tx:
            [reaped] = await tx.jobs_reap_expired(JobsReapExpired(type_names=["a"], now=now))
        assert reaped.id == job.id
        assert reaped.status is JobStatus.PENDING
        assert (reaped.leased_by, reaped.leased_until) == (None, None)
        assert (reaped.rescued_at, reaped.rescued_from, reaped.rescue_reason) == (
            now,
            "w1",
            RescueReason.LEASE_EXPIRED.value,
        )
        assert reaped.last_attempt_error == "attempt abandoned: the lease held by worker w1 expired"
        assert reaped == await get(adapter, job.id)

        async with adapter.transaction() as tx:
            [again] = (
                await tx.jobs_acquire(
                    JobsAcquire(type_names=["a"], worker_id="w2", lease_for=LEASE, now=at(12))
                )
            ).jobs
            done = await tx.job_complete(JobComplete(job_id=job.id, worker_id="w2", now=at(13)))
        assert again.attempt == 2
        assert (done.job.rescued_at, done.job.rescued_from, done.job.rescue_reason) == (
            now,
            "w1",
            "lease_expired",
        )

    async def test_a_job_never_rescued_has_no_rescue(self, adapter: SqliteStateAdapter) -> None:
        job = await claim(adapter, "w1", "a")
        assert (job.rescued_at, job.rescued_from, job.rescue_reason) == (None, None, None)


class TestSqlAlchemyProvider:
    async def test_heartbeat_and_listing_inside_a_callers_sqlalchemy_transaction(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        await heartbeat(adapter, "lapsed", T0)
        job = await claim(adapter, "lapsed", "a")
        engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")
        try:
            async with engine.begin() as conn, adapter.transaction(connection=conn) as tx:
                result = await tx.worker_heartbeat(beat("joined", at(31), release_dead=True))
                listed = await tx.workers_list(WorkersList(now=at(31)))
        finally:
            await engine.dispose()
        assert result.dead_worker_ids == ["lapsed"]
        assert [j.id for j in result.released_jobs] == [job.id]
        assert result.released_jobs[0].rescue_reason == "worker_dead"
        assert {row.id: row.state for row in listed} == {"joined": "running", "lapsed": "dead"}
        assert (await get(adapter, job.id)).rescued_from == "lapsed"


class TestUpgradeFrom0003:
    @staticmethod
    def build_0003_database(db_path: Path) -> dict[str, str]:
        """A database migrated (and used) by a version that knew 0001 to 0003: one job per status."""
        q = queries("jobchain_")
        ids = {status: new_id() for status in ("pending", "running", "completed")}
        with sqlite3.connect(db_path) as conn:
            for name in ("0001_initial", "0002_attempt_start", "0003_drop_listing_status_idx"):
                for statement in migration_statements(name, "jobchain_"):
                    conn.execute(statement)
            conn.execute(q.migration_table_create)
            for name in ("0001_initial", "0002_attempt_start", "0003_drop_listing_status_idx"):
                conn.execute(q.migration_record, {"name": name, "applied_at": "2029-01-01T00:00:00.000000Z"})
            stamp = "2029-06-01T00:00:00.000000Z"
            for status, job_id in ids.items():
                conn.execute(
                    "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
                    " input, created_at, scheduled_at, attempt, leased_by, leased_until, lease_generation,"
                    " first_attempt_at, attempt_started_at)"
                    " VALUES (?, 'a', ?, 'a', 0, ?, '{\"n\":1}', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_id,
                        job_id,
                        status,
                        stamp,
                        stamp,
                        0 if status == "pending" else 1,
                        "old-worker" if status == "running" else None,
                        "2029-06-01T00:01:00.000000Z" if status == "running" else None,
                        0 if status == "pending" else 1,
                        None if status == "pending" else stamp,
                        None if status == "pending" else stamp,
                    ),
                )
        conn.close()
        return ids

    async def test_rows_read_back_unrescued_and_the_registry_works(self, db_path: Path) -> None:
        ids = self.build_0003_database(db_path)
        adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
        try:
            await adapter.migrate()
            jobs = {status: await get(adapter, job_id) for status, job_id in ids.items()}
            for job in jobs.values():
                assert (job.rescued_at, job.rescued_from, job.rescue_reason) == (None, None, None)
                assert job.input == {"n": 1}
            assert jobs["running"].leased_by == "old-worker"
            assert jobs["running"].first_attempt_at == datetime(2029, 6, 1, tzinfo=UTC)

            result = await heartbeat(adapter, "new-worker", T0, type_names=["a"])
            assert result == WorkerHeartbeatResult(next_lease_expiry=timedelta(0))
            assert [row.id for row in await workers(adapter, T0)] == ["new-worker"]
            async with adapter.transaction() as tx:
                [reaped] = await tx.jobs_reap_expired(JobsReapExpired(type_names=["a"], now=T0))
            assert reaped.id == ids["running"]
            assert reaped.rescued_from == "old-worker"
        finally:
            await adapter.close()
        with sqlite3.connect(db_path) as conn:
            names = [row[0] for row in conn.execute("SELECT name FROM jobchain_migration ORDER BY name")]
        conn.close()
        assert "0004_worker_registry" in names

    async def test_an_unmigrated_0003_database_asks_for_the_migration(self, db_path: Path) -> None:
        ids = self.build_0003_database(db_path)
        adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
        try:
            with pytest.raises(CoreSchemaNotMigratedError, match=r"0004_worker_registry.*jobchain migrate"):
                await get(adapter, ids["pending"])
            with pytest.raises(CoreSchemaNotMigratedError):
                await heartbeat(adapter, "w", T0)
            await adapter.migrate()  # the same adapter migrates, then works
            assert (await get(adapter, ids["pending"])).status is JobStatus.PENDING
        finally:
            await adapter.close()


class TestSchema:
    async def test_the_worker_table_rejects_an_unknown_state_and_rescue_reason(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        await heartbeat(adapter, "w1", T0)
        job_id = await create(adapter, "a")
        with sqlite3.connect(db_path) as conn:
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute("UPDATE jobchain_worker SET state = 'asleep'")
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute("UPDATE jobchain_job SET rescue_reason = 'whim' WHERE id = ?", (job_id,))
        conn.close()

    async def test_release_and_lookup_scan_only_running_jobs(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        q = queries("jobchain_")
        with sqlite3.connect(db_path) as conn:
            for sql, params in (
                (q.worker_jobs_release, {"worker_ids": "[]", "now": "x", "now_iso": "x", "errors_kept": 10}),
                (q.worker_heartbeat_lookup, {"worker_id": "w", "type_names": "[]"}),
            ):
                plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
                assert "jobchain_job_expired_lease_idx" in plan
        conn.close()
