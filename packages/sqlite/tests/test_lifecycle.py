"""The SQLite lifecycle operations beyond the conformance suite: propagation down deep and
cyclic blocker graphs in one statement, fencing, the error history's bound, redrive,
retention, and the query plans of the new statements."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobchain.contracts import (
    ChainGet,
    ChainsCancel,
    ChainsPrune,
    CompletesJobsInBatches,
    JobComplete,
    JobFail,
    JobGet,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsRetry,
    NewJob,
    StateTx,
)
from jobchain.entities import (
    ATTEMPT_ERRORS_KEPT,
    AttemptError,
    Deduplication,
    Job,
    JobStatus,
    Schedule,
    new_id,
)
from jobchain.errors import (
    JobCancelledError,
    JobFinishedError,
    JobTakenByAnotherWorkerError,
)
from jobchain_sqlite import SqliteStateAdapter
from jobchain_sqlite.providers import AiosqliteExecutor
from jobchain_sqlite.queries import queries

NOW = Schedule(after=timedelta())
Write = Callable[[StateTx], Awaitable[object]]
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def chain(
    type_name: str = "t", *, blockers: Sequence[str] = (), runs_after: bool = False, **kw: Any
) -> NewJob:
    return NewJob(
        id=new_id(),
        type_name=type_name,
        chain_type_name=type_name,
        blocker_chain_ids=tuple(blockers),
        runs_after_failed_blockers=runs_after,
        **kw,
    )


async def create(adapter: SqliteStateAdapter, *jobs: NewJob) -> list[str]:
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs, now=T0))
    return [job.id for job in jobs]


async def get(adapter: SqliteStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        job = await tx.job_get(JobGet(job_id=job_id))
    assert job is not None
    return job


async def claim(
    adapter: SqliteStateAdapter, worker: str = "w1", now: datetime = T0, limit: int = 10
) -> list[Job]:
    async with adapter.transaction() as tx:
        return (
            await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id=worker, lease_for=LEASE, limit=limit, now=now)
            )
        ).jobs


def workerless_writes(job_id: str) -> list[Write]:
    return [
        lambda tx: tx.job_complete(JobComplete(job_id=job_id)),
        lambda tx: tx.job_reschedule(JobReschedule(job_id=job_id, schedule=NOW, error="x")),
        lambda tx: tx.job_fail(JobFail(job_id=job_id, error="x")),
    ]


class CountingExecutor(AiosqliteExecutor):
    statements = 0

    async def fetch(self, sql: str, params: Any = None) -> Any:
        type(self).statements += 1
        return await super().fetch(sql, params)


class TestPropagation:
    async def test_a_failure_fails_a_deep_graph_in_one_statement(
        self, adapter: SqliteStateAdapter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        [a] = await create(adapter, chain())
        [b] = await create(adapter, chain(blockers=[a]))
        [c] = await create(adapter, chain(blockers=[b]))
        [d, e] = await create(adapter, chain(blockers=[c]), chain(blockers=[c, a]))
        [running] = await claim(adapter)
        assert running.id == a
        monkeypatch.setattr("jobchain_sqlite.state.AiosqliteExecutor", CountingExecutor)
        CountingExecutor.statements = 0
        async with adapter.transaction() as tx:
            failed = await tx.job_fail(JobFail(job_id=a, error="boom", worker_id="w1", now=at(1)))
        # BEGIN, job_fail, jobs_propagate, COMMIT.
        assert CountingExecutor.statements == 4
        assert failed.job.status is JobStatus.FAILED
        assert failed.job.failed_at == at(1)
        assert failed.was_running
        assert failed.previous_leased_by == "w1"
        by_id = {job.id: job for job in failed.failed_jobs}
        assert set(by_id) == {b, c, d, e}
        assert {job_id: job.failed_by_chain_id for job_id, job in by_id.items()} == {b: a, c: b, d: c, e: c}
        assert by_id[b].last_attempt_error == f"blocker chain {a} (t) failed"
        [entry] = by_id[b].attempt_errors
        assert (entry.error_type, entry.worker_id, entry.attempt, entry.at) == (
            "BlockerChainFailed",
            None,
            0,
            at(1),
        )
        assert entry.message == by_id[b].last_attempt_error
        assert all(job.status is JobStatus.FAILED and job.failed_at == at(1) for job in by_id.values())

    async def test_a_cancellation_names_its_cause_then_failures_below(
        self, adapter: SqliteStateAdapter
    ) -> None:
        [a] = await create(adapter, chain())
        [b] = await create(adapter, chain(blockers=[a]))
        [c] = await create(adapter, chain(blockers=[b]))
        async with adapter.transaction() as tx:
            result = await tx.chains_cancel(ChainsCancel(chain_ids=[a], reason="no longer needed", now=at(1)))
        assert [job.id for job in result.cancelled] == [a]
        assert result.cancelled[0].cancel_reason == "no longer needed"
        assert result.cancelled[0].cancelled_at == at(1)
        assert result.running_job_ids == []
        by_id = {job.id: job for job in result.failed_jobs}
        assert by_id[b].last_attempt_error == f"blocker chain {a} (t) was cancelled"
        assert by_id[b].attempt_errors[-1].error_type == "BlockerChainCancelled"
        assert by_id[c].attempt_errors[-1].error_type == "BlockerChainFailed"

    async def test_the_first_declared_failing_blocker_is_the_cause(self, adapter: SqliteStateAdapter) -> None:
        x, y = await create(adapter, chain(), chain())
        [j] = await create(adapter, chain(blockers=[y, x]))
        async with adapter.transaction() as tx:
            result = await tx.chains_cancel(ChainsCancel(chain_ids=[x, y], now=at(1)))
        [failed] = result.failed_jobs
        assert failed.id == j
        assert failed.failed_by_chain_id == y
        assert len(failed.attempt_errors) == 1

    async def test_a_cycle_of_blockers_terminates(self, adapter: SqliteStateAdapter) -> None:
        # a's continuation waits for b, b waits for a: a deadlock only a cancel resolves.
        z, a = await create(adapter, chain(), chain())
        [b] = await create(adapter, chain(blockers=[a, z]))
        a1 = NewJob(
            id=new_id(), type_name="t", chain_type_name="t", chain_id=a, chain_index=1, blocker_chain_ids=[b]
        )
        await create(adapter, a1)
        async with adapter.transaction() as tx:
            result = await tx.chains_cancel(ChainsCancel(chain_ids=[z], now=at(1)))
        assert {job.id: job.failed_by_chain_id for job in result.failed_jobs} == {b: a, a1.id: b}

    async def test_runs_after_failed_blockers_waits_for_every_blocker_to_finish(
        self, adapter: SqliteStateAdapter
    ) -> None:
        a, f = await create(adapter, chain(), chain())
        opt_in, only_a, plain = await create(
            adapter,
            chain(blockers=[a, f], runs_after=True),
            chain(blockers=[a], runs_after=True),
            chain(blockers=[a]),
        )
        assert (await get(adapter, opt_in)).runs_after_failed_blockers
        async with adapter.transaction() as tx:
            failed = await tx.job_fail(JobFail(job_id=a, error="boom", now=at(5)))
        assert [job.id for job in failed.failed_jobs] == [plain]
        [released] = failed.unblocked_jobs
        assert (released.id, released.status, released.scheduled_at) == (only_a, JobStatus.PENDING, at(5))
        assert released.attempt_errors == ()
        assert (await get(adapter, opt_in)).status is JobStatus.BLOCKED
        async with adapter.transaction() as tx:
            done = await tx.job_complete(JobComplete(job_id=f, output=1, now=at(6)))
        assert [job.id for job in done.unblocked_jobs] == [opt_in]

    async def test_a_new_job_with_runs_after_is_pending_behind_finished_blockers(
        self, adapter: SqliteStateAdapter
    ) -> None:
        [a] = await create(adapter, chain())
        async with adapter.transaction() as tx:
            await tx.job_fail(JobFail(job_id=a, error="boom", now=at(1)))
        [opt_in] = await create(adapter, chain(blockers=[a], runs_after=True))
        job = await get(adapter, opt_in)
        assert job.status is JobStatus.PENDING
        assert job.runs_after_failed_blockers

    async def test_a_batch_fails_dependents_of_its_own_chains_failed_at_insert(
        self, adapter: SqliteStateAdapter
    ) -> None:
        [gone] = await create(adapter, chain())
        async with adapter.transaction() as tx:
            await tx.chains_cancel(ChainsCancel(chain_ids=[gone], now=at(1)))
        # The dependent comes first in the batch, its blocker (failed at insert) second.
        first = chain("first")
        dependent = chain(blockers=[first.id])
        opt_in = chain(blockers=[first.id], runs_after=True)
        first_in_batch = replace(first, blocker_chain_ids=(gone,))
        async with adapter.transaction() as tx:
            created = await tx.jobs_create(JobsCreate(jobs=[dependent, opt_in, first_in_batch], now=at(2)))
        by_id = {c.job.id: c for c in created}
        assert by_id[first.id].job.last_attempt_error == f"blocker chain {gone} (t) was cancelled"
        assert by_id[dependent.id].job.last_attempt_error == f"blocker chain {first.id} (first) failed"
        assert by_id[opt_in.id].job.status is JobStatus.PENDING
        for job_id, c in by_id.items():
            assert await get(adapter, job_id) == c.job
        assert [c.incomplete_blocker_chain_ids for c in created] == [(), (), ()]


class TestFencing:
    async def test_a_cancelled_running_job_refuses_its_workers_writes(
        self, adapter: SqliteStateAdapter
    ) -> None:
        [a] = await create(adapter, chain())
        [job] = await claim(adapter)
        async with adapter.transaction() as tx:
            result = await tx.chains_cancel(ChainsCancel(chain_ids=[a], reason="stop", now=at(1)))
        assert result.running_job_ids == [a]
        assert result.previous_leased_by == {a: "w1"}
        assert result.cancelled[0].leased_by is None
        gen = job.lease_generation
        writes: list[Write] = [
            lambda tx: tx.job_renew_lease(
                JobRenewLease(job_id=a, worker_id="w1", lease_for=LEASE, lease_generation=gen)
            ),
            lambda tx: tx.job_complete(JobComplete(job_id=a, worker_id="w1", lease_generation=gen)),
            lambda tx: tx.job_reschedule(
                JobReschedule(job_id=a, worker_id="w1", schedule=Schedule(after=timedelta()), error="x")
            ),
            lambda tx: tx.job_fail(JobFail(job_id=a, worker_id="w1", error="x")),
        ]
        for write in writes:
            async with adapter.transaction() as tx:
                with pytest.raises(JobCancelledError, match="stop"):
                    await write(tx)
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            [refused] = await tx.jobs_complete([JobComplete(job_id=a, worker_id="w1", lease_generation=gen)])
        assert isinstance(refused, JobCancelledError)
        after = await get(adapter, a)
        assert (after.status, after.output, after.last_attempt_error) == (JobStatus.CANCELLED, None, None)

    async def test_workerless_writes_to_finished_jobs_raise_job_finished(
        self, adapter: SqliteStateAdapter
    ) -> None:
        a, b = await create(adapter, chain(), chain())
        async with adapter.transaction() as tx:
            await tx.job_fail(JobFail(job_id=a, error="boom"))
            await tx.chains_cancel(ChainsCancel(chain_ids=[b]))
        for job_id, status in ((a, "failed"), (b, "cancelled")):
            for write in workerless_writes(job_id):
                async with adapter.transaction() as tx:
                    with pytest.raises(JobFinishedError, match=status):
                        await write(tx)

    async def test_a_worker_whose_job_another_call_failed_lost_its_lease(
        self, adapter: SqliteStateAdapter
    ) -> None:
        [a] = await create(adapter, chain())
        await claim(adapter)
        async with adapter.transaction() as tx:
            await tx.job_fail(JobFail(job_id=a, error="failed by an operator"))
        async with adapter.transaction() as tx:
            with pytest.raises(JobTakenByAnotherWorkerError):
                await tx.job_complete(JobComplete(job_id=a, worker_id="w1"))

    async def test_cancel_is_all_or_nothing(self, adapter: SqliteStateAdapter) -> None:
        a, b = await create(adapter, chain(), chain())
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=b))
            missing = new_id()
            result = await tx.chains_cancel(ChainsCancel(chain_ids=[a, b, missing]))
        assert (result.cancelled, result.not_found, result.not_cancellable) == (
            [],
            [missing],
            [(b, "completed")],
        )
        assert (await get(adapter, a)).status is JobStatus.PENDING


class TestErrorHistory:
    async def test_the_history_keeps_the_last_entries_oldest_first(self, adapter: SqliteStateAdapter) -> None:
        [a] = await create(adapter, chain())
        for n in range(ATTEMPT_ERRORS_KEPT + 3):
            [job] = await claim(adapter, now=at(n))
            error = AttemptError(
                attempt=job.attempt,
                worker_id="w1",
                error_type="ValueError",
                message=f"m{n}",
                traceback="tb",
                at=at(n),
            )
            async with adapter.transaction() as tx:
                await tx.job_reschedule(
                    JobReschedule(
                        job_id=a,
                        worker_id="w1",
                        schedule=Schedule(at=at(n)),
                        error=f"m{n}",
                        attempt_error=error,
                        now=at(n),
                    )
                )
        job = await get(adapter, a)
        assert [e.message for e in job.attempt_errors] == [f"m{n}" for n in range(3, ATTEMPT_ERRORS_KEPT + 3)]
        assert job.attempt_errors[-1] == AttemptError(
            attempt=13, worker_id="w1", error_type="ValueError", message="m12", traceback="tb", at=at(12)
        )

    async def test_a_reap_records_the_abandoned_attempt(self, adapter: SqliteStateAdapter) -> None:
        [a] = await create(adapter, chain())
        await claim(adapter)
        async with adapter.transaction() as tx:
            [reaped] = await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=at(600)))
        [entry] = reaped.attempt_errors
        assert (entry.error_type, entry.worker_id, entry.attempt, entry.at) == (
            "AttemptAbandoned",
            "w1",
            1,
            at(600),
        )
        assert entry.message == reaped.last_attempt_error
        assert reaped.id == a

    async def test_error_types_list_dead_letters_by_their_last_error(
        self, adapter: SqliteStateAdapter
    ) -> None:
        a, b, c = await create(adapter, chain(), chain(), chain())
        async with adapter.transaction() as tx:
            for job_id, kind in ((a, "TimeoutError"), (b, "ValueError")):
                error = AttemptError(attempt=0, worker_id=None, error_type=kind, message="x", at=T0)
                await tx.job_fail(JobFail(job_id=job_id, error="x", attempt_error=error))
            page = await tx.jobs_list(JobsList(statuses=["failed"], error_types=["TimeoutError"]))
            everything = await tx.jobs_list(JobsList(error_types=[]))
        assert [job.id for job in page.items] == [a]
        assert len(everything.items) == 3
        assert c in {job.id for job in everything.items}

    async def test_a_failed_chain_frees_its_deduplication_key(self, adapter: SqliteStateAdapter) -> None:
        dedup = Deduplication(key="k")
        [a] = await create(adapter, chain(deduplication=dedup))
        async with adapter.transaction() as tx:
            again = await tx.jobs_create(JobsCreate(jobs=[chain(deduplication=dedup)]))
            assert again[0].deduplicated
            await tx.job_fail(JobFail(job_id=a, error="x"))
            fresh = await tx.jobs_create(JobsCreate(jobs=[chain(deduplication=dedup)]))
        assert not fresh[0].deduplicated
        assert fresh[0].job.id != a


class TestRetry:
    async def test_retry_redrives_the_job_and_its_dependents(self, adapter: SqliteStateAdapter) -> None:
        [a] = await create(adapter, chain())
        [b] = await create(adapter, chain(blockers=[a]))
        [c] = await create(adapter, chain(blockers=[b]))
        [job] = await claim(adapter)
        async with adapter.transaction() as tx:
            await tx.job_fail(JobFail(job_id=a, worker_id="w1", error="boom", now=at(1)))
            refused = await tx.jobs_retry(JobsRetry(job_ids=[b]))
            pending = await tx.jobs_retry(JobsRetry(job_ids=[new_id(), a]))
        assert refused.blocked_by_failed == [(b, a)]
        assert pending.not_retryable == []
        assert len(pending.not_found) == 1
        async with adapter.transaction() as tx:
            result = await tx.jobs_retry(JobsRetry(job_ids=[a], schedule=Schedule(at=at(30)), now=at(2)))
        [retried] = result.retried
        assert (retried.status, retried.scheduled_at, retried.attempt, retried.attempt_base) == (
            JobStatus.PENDING,
            at(30),
            1,
            1,
        )
        assert (retried.failed_at, retried.last_attempt_error) == (None, "boom")
        assert {job.id: job.status for job in result.reblocked} == {
            b: JobStatus.BLOCKED,
            c: JobStatus.BLOCKED,
        }
        assert all(job.failed_by_chain_id is None and job.failed_at is None for job in result.reblocked)
        assert [e.error_type for e in result.reblocked[0].attempt_errors] == ["BlockerChainFailed"]
        async with adapter.transaction() as tx:
            done = await tx.job_complete(JobComplete(job_id=a, now=at(40)))
            not_failed = await tx.jobs_retry(JobsRetry(job_ids=[a]))
        assert [job.id for job in done.unblocked_jobs] == [b]
        assert not_failed.not_retryable == [(a, "completed")]
        assert job.lease_generation == 1

    async def test_a_retried_job_behind_an_open_blocker_goes_back_to_blocked(
        self, adapter: SqliteStateAdapter
    ) -> None:
        [a] = await create(adapter, chain())
        [b] = await create(adapter, chain(blockers=[a]))
        async with adapter.transaction() as tx:
            await tx.chains_cancel(ChainsCancel(chain_ids=[b], reason="later"))
            result = await tx.jobs_retry(JobsRetry(job_ids=[b]))
        [job] = result.retried
        assert (job.status, job.cancel_reason, job.cancelled_at) == (JobStatus.BLOCKED, None, None)


class TestPrune:
    async def test_prune_deletes_old_terminal_chains_oldest_first(self, adapter: SqliteStateAdapter) -> None:
        done, failed, cancelled, young, blocker = await create(adapter, *(chain() for _ in range(5)))
        [waiting] = await create(adapter, chain(blockers=[blocker]))
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=done, now=at(3)))
            await tx.job_fail(JobFail(job_id=failed, error="x", now=at(1)))
            await tx.chains_cancel(ChainsCancel(chain_ids=[cancelled], now=at(2)))
            await tx.job_complete(JobComplete(job_id=young, now=at(100)))
            await tx.chains_cancel(ChainsCancel(chain_ids=[waiting], now=at(1)))
            await tx.job_complete(JobComplete(job_id=blocker, now=at(0)))
            kept_failed = await tx.chains_prune(
                ChainsPrune(completed_before=at(10), failed_before=None, cancelled_before=at(10))
            )
            failures = await tx.chains_prune(ChainsPrune(failed_before=at(10)))
            nothing = await tx.chains_prune(ChainsPrune())
        assert not kept_failed.busy
        assert [(c.id, c.status) for c in kept_failed.chains] == [
            (blocker, "completed"),
            (waiting, "cancelled"),
            (cancelled, "cancelled"),
            (done, "completed"),
        ]
        assert [(c.id, c.status) for c in failures.chains] == [(failed, "failed")]
        assert (nothing.chains, nothing.busy) == ([], False)
        async with adapter.transaction(read_only=True) as tx:
            assert await tx.chain_get(ChainGet(chain_id=young)) is not None
            assert await tx.chain_get(ChainGet(chain_id=blocker)) is None
            assert (await tx.jobs_list(JobsList())).items == [await tx.job_get(JobGet(job_id=young))]

    async def test_a_chain_blocking_a_live_job_is_kept(self, adapter: SqliteStateAdapter) -> None:
        [a] = await create(adapter, chain())
        [b] = await create(adapter, chain(blockers=[a]))
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=a, now=at(1)))
            none = await tx.chains_prune(ChainsPrune(completed_before=at(10)))
            await tx.job_complete(JobComplete(job_id=b, now=at(2)))
            both = await tx.chains_prune(ChainsPrune(completed_before=at(10)))
        assert none.chains == []
        assert [(c.id, c.type_name, c.status) for c in both.chains] == [
            (a, "t", "completed"),
            (b, "t", "completed"),
        ]

    async def test_the_limit_never_leaves_a_dangling_blocker(self, adapter: SqliteStateAdapter) -> None:
        [a] = await create(adapter, chain())
        [b] = await create(adapter, chain(blockers=[a]))
        [c] = await create(adapter, chain())
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=a, now=at(1)))
            await tx.job_complete(JobComplete(job_id=c, now=at(2)))
            await tx.job_complete(JobComplete(job_id=b, now=at(3)))
            first = await tx.chains_prune(ChainsPrune(completed_before=at(10), limit=2))
            second = await tx.chains_prune(ChainsPrune(completed_before=at(10), limit=2))
        # a (oldest) blocks b, which is beyond the limit: a stays for the next batch.
        assert [ch.id for ch in first.chains] == [c]
        assert [ch.id for ch in second.chains] == [a, b]

    async def test_chains_that_cannot_go_never_crowd_out_the_rest(self, adapter: SqliteStateAdapter) -> None:
        # x blocks y, y blocks z, which is still pending: neither x nor y can go yet, however
        # old, and the limit still reaches w behind them.
        [x] = await create(adapter, chain())
        [y] = await create(adapter, chain(blockers=[x]))
        [z, w] = await create(adapter, chain(blockers=[y]), chain())
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=x, now=at(1)))
            await tx.job_complete(JobComplete(job_id=y, now=at(2)))
            await tx.job_complete(JobComplete(job_id=w, now=at(3)))
            pruned = await tx.chains_prune(ChainsPrune(completed_before=at(10), limit=1))
        assert [c.id for c in pruned.chains] == [w]
        assert (await get(adapter, z)).status is JobStatus.PENDING


class TestPlans:
    @staticmethod
    def plan(db_path: Path, sql: str, params: Mapping[str, object]) -> str:
        with sqlite3.connect(db_path) as conn:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        conn.close()
        return "\n".join(str(row[-1]) for row in rows)

    async def test_propagation_follows_the_blocker_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        params = {"origins": "[]", "now": "x", "now_iso": "x", "errors_kept": 10}
        plan = self.plan(db_path, queries("jobchain_").jobs_propagate, params)
        assert "jobchain_job_blocker_chain_idx" in plan
        assert "SCAN jobchain_job\n" not in plan + "\n"

    async def test_prune_of_failed_and_cancelled_chains_uses_their_indexes(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        params = {"completed_before": None, "failed_before": "x", "cancelled_before": "x", "limit": 10}
        plan = self.plan(db_path, queries("jobchain_").chains_prune, params)
        assert "jobchain_job_failed_idx" in plan
        assert "jobchain_job_cancelled_idx" in plan


class TestCancelBesideAnAtomicAttempt:
    """SQLite has one writer: a cancel waits for an atomic attempt's transaction to end."""

    @staticmethod
    async def cancel_beside_attempt(
        adapter: SqliteStateAdapter, job: Job, finish: Callable[[StateTx], Awaitable[object]]
    ) -> Any:
        async with adapter.transaction() as attempt_tx:
            held = await attempt_tx.job_get(JobGet(job_id=job.id, lock=True))
            assert held is not None
            cancel = asyncio.ensure_future(cancel_in_own_tx(adapter, job.chain_id))
            for _ in range(20):  # let the cancel run as far as it can: it queues on the writer
                await asyncio.sleep(0)
            assert not cancel.done()
            await finish(attempt_tx)
        return await cancel

    async def test_the_cancel_waits_then_finds_the_chain_completed(self, adapter: SqliteStateAdapter) -> None:
        await create(adapter, chain())
        [job] = await claim(adapter)
        result = await self.cancel_beside_attempt(
            adapter,
            job,
            lambda tx: tx.job_complete(
                JobComplete(job_id=job.id, worker_id="w1", lease_generation=job.lease_generation)
            ),
        )
        assert result.cancelled == []
        assert result.not_cancellable == [(job.chain_id, "completed")]

    async def test_the_cancel_waits_then_cancels_a_rescheduled_job(self, adapter: SqliteStateAdapter) -> None:
        await create(adapter, chain())
        [job] = await claim(adapter)
        result = await self.cancel_beside_attempt(
            adapter,
            job,
            lambda tx: tx.job_reschedule(
                JobReschedule(job_id=job.id, worker_id="w1", schedule=NOW, error="x")
            ),
        )
        assert [cancelled.id for cancelled in result.cancelled] == [job.id]
        assert result.running_job_ids == []


async def cancel_in_own_tx(adapter: SqliteStateAdapter, chain_id: str) -> Any:
    async with adapter.transaction() as tx:
        return await tx.chains_cancel(ChainsCancel(chain_ids=[chain_id]))
