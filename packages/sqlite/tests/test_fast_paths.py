"""The SQLite adapter's batch paths: jobs_complete (group commit) and plain-root jobs_create.

Each must decide exactly as the general path (job_complete one by one, the lookup before the
insert) would; these tests compare the two or check the stored rows against the results.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
import pytest

from jobchain.contracts import (
    CompletesJobsInBatches,
    JobComplete,
    JobCompleted,
    JobGet,
    JobsAcquire,
    JobsCreate,
    NewJob,
)
from jobchain.entities import Deduplication, JobStatus, Schedule, new_id
from jobchain.errors import (
    DuplicateJobIdError,
    JobAlreadyCompletedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain_sqlite import SqliteStateAdapter
from jobchain_sqlite.queries import queries
from jobchain_sqlite.rows import JOB_COLUMNS

LEASE = timedelta(seconds=30)
NOW = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _new(type_name: str = "t", **fields: object) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)  # type: ignore[arg-type]


async def _claim(adapter: SqliteStateAdapter, limit: int, type_name: str = "t") -> dict[str, int]:
    async with adapter.transaction() as tx:
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=[type_name], worker_id="w", lease_for=LEASE, limit=limit, now=NOW)
        )
    return {job.id: job.lease_generation for job in claimed.jobs}


class TestJobsComplete:
    async def test_each_completion_is_decided_on_its_own_in_one_call(
        self, adapter: SqliteStateAdapter
    ) -> None:
        mine, stolen, done_before, blocker = _new(), _new(), _new(), _new()
        dependent = _new("dep", blocker_chain_ids=[blocker.id])
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[mine, stolen, done_before, blocker, dependent], now=NOW))
        generation = await _claim(adapter, 4)
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=done_before.id, worker_id="w", now=NOW))

        later = NOW + timedelta(seconds=1)
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            results = await tx.jobs_complete(
                [
                    JobComplete(
                        job_id=mine.id,
                        output={"n": 1},
                        worker_id="w",
                        lease_generation=generation[mine.id],
                        now=later,
                    ),
                    JobComplete(job_id=stolen.id, worker_id="w", lease_generation=generation[stolen.id] + 1),
                    JobComplete(job_id="no-such-job", worker_id="w"),
                    JobComplete(job_id=done_before.id, worker_id="w"),
                    JobComplete(job_id=blocker.id, output=[1, "é"], worker_id="w", now=later),
                ]
            )
        assert [type(r) for r in results] == [
            JobCompleted,
            JobTakenByAnotherWorkerError,
            JobNotFoundError,
            JobAlreadyCompletedError,
            JobCompleted,
        ]
        first, last = results[0], results[4]
        assert isinstance(first, JobCompleted)
        assert isinstance(last, JobCompleted)
        assert first.job.output == {"n": 1}
        assert first.job.completed_at == later
        assert first.job.completed_by == "w"
        assert first.chain_completed
        assert first.was_running
        assert first.previous_leased_by == "w"
        assert first.unblocked_jobs == []
        assert last.job.output == [1, "é"]
        assert [job.id for job in last.unblocked_jobs] == [dependent.id]
        assert last.unblocked_jobs[0].scheduled_at == later

        async with adapter.transaction(read_only=True) as tx:
            untouched = await tx.job_get(JobGet(job_id=stolen.id))
            released = await tx.job_get(JobGet(job_id=dependent.id))
            stored = await tx.job_get(JobGet(job_id=mine.id))
        assert untouched is not None
        assert untouched.status is JobStatus.RUNNING
        assert released == last.unblocked_jobs[0]
        assert stored == first.job

    async def test_matches_job_complete_one_by_one(self, db_path: Path, tmp_path: Path) -> None:
        """Same data, two databases: the batch and the sequential calls leave the same rows."""
        a, b, c = _new(), _new(), _new()
        cont = NewJob(id=new_id(), type_name="t", chain_type_name="t", chain_id=a.id, chain_index=1)
        both = _new("dep", blocker_chain_ids=[b.id, c.id])
        outcomes = []
        for path in (tmp_path / "batch.db", tmp_path / "single.db"):
            adapter = SqliteStateAdapter(str(path))
            await adapter.migrate()
            try:
                async with adapter.transaction() as tx:
                    await tx.jobs_create(JobsCreate(jobs=[a, b, c, cont, both], now=NOW))
                await _claim(adapter, 4)
                params = [
                    JobComplete(job_id=job_id, worker_id="w", output=n, now=NOW + timedelta(seconds=n))
                    for n, job_id in enumerate([a.id, c.id, cont.id, b.id, both.id])
                ]
                async with adapter.transaction() as tx:
                    if path.name == "batch.db":
                        assert isinstance(tx, CompletesJobsInBatches)
                        results = await tx.jobs_complete(params)
                    else:
                        results = []
                        for one in params:
                            try:
                                results.append(await tx.job_complete(one))
                            except JobTakenByAnotherWorkerError as refused:
                                results.append(refused)
                with sqlite3.connect(path) as conn:
                    rows = conn.execute("SELECT * FROM jobchain_job ORDER BY id").fetchall()
                conn.close()
            finally:
                await adapter.close()
            outcomes.append((results, rows))
        (batch, batch_rows), (single, single_rows) = outcomes
        assert batch_rows == single_rows
        assert [type(r) for r in batch] == [type(r) for r in single]
        for x, y in zip(batch, single, strict=True):
            if isinstance(x, JobCompleted):
                assert x == y
            else:
                assert str(x) == str(y)
        released = batch[3]
        assert isinstance(released, JobCompleted)
        assert [job.id for job in released.unblocked_jobs] == [both.id]

    async def test_blockers_completing_together_release_their_dependents_exactly(
        self, adapter: SqliteStateAdapter
    ) -> None:
        a, b, c = _new(), _new(), _new()
        both = _new("dep", blocker_chain_ids=[a.id, b.id])
        all_three = _new("dep", blocker_chain_ids=[a.id, b.id, c.id])
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[a, b, c, both, all_three], now=NOW))
        await _claim(adapter, 3)
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            first, second = await tx.jobs_complete(
                [JobComplete(job_id=b.id, worker_id="w"), JobComplete(job_id=a.id, worker_id="w")]
            )
        assert isinstance(first, JobCompleted)
        assert isinstance(second, JobCompleted)
        assert first.unblocked_jobs == []
        assert [job.id for job in second.unblocked_jobs] == [both.id]
        async with adapter.transaction(read_only=True) as tx:
            waiting = await tx.job_get(JobGet(job_id=all_three.id))
        assert waiting is not None
        assert waiting.status is JobStatus.BLOCKED
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            [last] = await tx.jobs_complete([JobComplete(job_id=c.id, worker_id="w")])
        assert isinstance(last, JobCompleted)
        assert [job.id for job in last.unblocked_jobs] == [all_three.id]

    async def test_repeated_ids_and_workerless_items_are_decided_in_order(
        self, adapter: SqliteStateAdapter
    ) -> None:
        a, b = _new(), _new(schedule=Schedule(after=timedelta(hours=1)))
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[a, b], now=NOW))
        await _claim(adapter, 2)  # a runs; b stays pending (not due yet)
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            results = await tx.jobs_complete(
                [
                    JobComplete(job_id=a.id, worker_id="w"),
                    JobComplete(job_id=a.id, worker_id="w"),
                    JobComplete(job_id=b.id),
                ]
            )
        assert [type(r) for r in results] == [JobCompleted, JobAlreadyCompletedError, JobCompleted]
        workerless = results[2]
        assert isinstance(workerless, JobCompleted)
        assert workerless.previous_leased_by is None
        assert not workerless.was_running

    async def test_empty_batch_is_empty(self, adapter: SqliteStateAdapter) -> None:
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            assert await tx.jobs_complete([]) == []


class TestCreatePlainRoots:
    async def test_returned_jobs_equal_the_stored_rows(self, adapter: SqliteStateAdapter) -> None:
        jobs = [
            _new(input={"k": [1, 2.5, None, True]}, trace_context={"tp": "x"}),
            _new(input="text", chain_trace_context=["c"]),
            _new(input=(1, 2), schedule=Schedule(at=NOW + timedelta(minutes=5))),
            _new(input={1: "int key"}, schedule=Schedule(at=NOW - timedelta(minutes=5))),
        ]
        async with adapter.transaction() as tx:
            created = await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW.astimezone()))
        async with adapter.transaction(read_only=True) as tx:
            for result in created:
                assert result == type(result)(job=result.job)
                assert await tx.job_get(JobGet(job_id=result.job.id)) == result.job
        assert created[2].job.input == [1, 2]
        assert created[3].job.input == {"1": "int key"}
        assert created[0].job.created_at == NOW
        assert created[2].job.scheduled_at == NOW + timedelta(minutes=5)

    async def test_existing_id_raises_duplicate_and_inserts_nothing(
        self, adapter: SqliteStateAdapter
    ) -> None:
        existing_root, existing_cont = _new(), _new()
        cont = NewJob(
            id=existing_cont.id, type_name="t", chain_type_name="t", chain_id=existing_root.id, chain_index=1
        )
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[existing_root, cont], now=NOW))
        for taken in (existing_root.id, existing_cont.id):
            fresh = [_new(), _new()]
            clash = NewJob(id=taken, type_name="t", chain_type_name="t")
            async with adapter.transaction() as tx:
                with pytest.raises(DuplicateJobIdError) as raised:
                    await tx.jobs_create(JobsCreate(jobs=[fresh[0], clash, fresh[1]]))
                assert raised.value.job_id == taken
                for job in fresh:
                    assert await tx.job_get(JobGet(job_id=job.id)) is None

    async def test_an_id_repeated_in_the_batch_raises_duplicate(self, adapter: SqliteStateAdapter) -> None:
        one = _new()
        async with adapter.transaction() as tx:
            with pytest.raises(DuplicateJobIdError) as raised:
                await tx.jobs_create(JobsCreate(jobs=[one, _new(), one]))
            assert raised.value.job_id == one.id

    async def test_a_batch_mixing_plain_and_deduplicated_roots(self, adapter: SqliteStateAdapter) -> None:
        first = _new(deduplication=Deduplication(key="k"))
        async with adapter.transaction() as tx:
            [original] = await tx.jobs_create(JobsCreate(jobs=[first], now=NOW))
        plain, again = _new(), _new(deduplication=Deduplication(key="k"))
        blocked = _new("dep", blocker_chain_ids=[plain.id])
        async with adapter.transaction() as tx:
            results = await tx.jobs_create(JobsCreate(jobs=[plain, again, blocked], now=NOW))
        assert [r.deduplicated for r in results] == [False, True, False]
        assert results[1].job == original.job
        assert results[0].job.status is JobStatus.PENDING
        assert results[2].job.status is JobStatus.BLOCKED
        assert results[2].incomplete_blocker_chain_ids == (plain.id,)
        async with adapter.transaction(read_only=True) as tx:
            for result in results:
                assert await tx.job_get(JobGet(job_id=result.job.id)) == result.job


class TestJoinedConnections:
    async def test_rows_by_name_decode_as_rows_by_position(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        """A joined aiosqlite connection returns rows by name; the adapter's own, by position."""
        job = _new(input={"a": [1, None]}, trace_context={"t": 1})
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        generation = await _claim(adapter, 1)
        async with aiosqlite.connect(db_path) as conn:
            async with adapter.transaction(connection=conn) as tx:
                assert isinstance(tx, CompletesJobsInBatches)
                [done] = await tx.jobs_complete(
                    [JobComplete(job_id=job.id, worker_id="w", lease_generation=generation[job.id], now=NOW)]
                )
                joined = await tx.job_get(JobGet(job_id=job.id))
            await conn.commit()
        assert isinstance(done, JobCompleted)
        async with adapter.transaction(read_only=True) as tx:
            own = await tx.job_get(JobGet(job_id=job.id))
        assert own == joined == done.job
        assert own is not None
        assert own.first_attempt_at == NOW
        assert own.completed_at == NOW


class TestRowLayout:
    async def test_job_columns_are_in_the_order_rows_are_read_by_position(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        with sqlite3.connect(db_path) as conn:
            names = tuple(row[1] for row in conn.execute("PRAGMA table_info(jobchain_job)"))
        conn.close()
        assert names == JOB_COLUMNS

    async def test_group_completion_drives_primary_key_lookups(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        with sqlite3.connect(db_path) as conn:
            plan = conn.execute(f"EXPLAIN QUERY PLAN {queries('jobchain_').jobs_complete}", {"items": "[]"})
            details = [str(row[-1]) for row in plan]
        conn.close()
        assert details[0].startswith("SCAN json_each")
        assert "jobchain_job_listing_status_idx" not in "\n".join(details)
