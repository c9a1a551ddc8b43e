"""SQLite specifics of the scheduling controls: which claim statement runs, the plans of the
new statements, and two adapters (two connections, as two processes would) contending for
one ordering key, one max_running limit and one rate window."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobchain.contracts import (
    ChainsDelete,
    ChainsPrune,
    JobBlockersGet,
    JobComplete,
    JobFail,
    JobGet,
    JobsAcquire,
    JobsCreate,
    JobsRetry,
    NewJob,
)
from jobchain.contracts.scheduling import TypesPause
from jobchain.entities import JobStatus, RateLimit, TypeLimits, new_id
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)
Q = queries("jobchain_")


def plan(db_path: Path, sql: str) -> str:
    params = dict.fromkeys(re.findall(r":(\w+)", sql), "[]")
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    conn.close()
    return "\n".join(str(row[-1]) for row in rows)


def new_root(type_name: str = "t", **kwargs: object) -> NewJob:
    job_id = new_id()
    return NewJob(id=job_id, type_name=type_name, chain_type_name=type_name, **kwargs)  # type: ignore[arg-type]


async def create(adapter: SqliteStateAdapter, *jobs: NewJob, now: datetime = T0) -> list[str]:
    async with adapter.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=jobs, now=now))
    return [c.job.id for c in created]


def claim(limit: int = 1, **kwargs: object) -> JobsAcquire:
    return JobsAcquire(
        type_names=["t"],
        worker_id="w",
        lease_for=LEASE,
        limit=limit,
        now=T0 + timedelta(seconds=1),
        **kwargs,  # type: ignore[arg-type]
    )


def raw_claim(db_path: Path, now: datetime) -> list[str]:
    """Run the plain claim statement by itself (what the adapter runs first)."""
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            Q.jobs_acquire,
            {
                "type_names": '["t"]',
                "now": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "worker_id": "w",
                "leased_until": "2099-01-01T00:00:00.000000Z",
                "type_leases": None,
                "limit": 5,
            },
        ).fetchall()
    conn.close()
    return [row[0] for row in rows]


class TestPlainClaim:
    """Claims without priorities, limits or pauses stay on the one-statement plain claim."""

    async def test_the_plain_statement_claims_while_no_pending_job_has_a_priority(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        [job] = await create(adapter, new_root())
        assert raw_claim(db_path, T0 + timedelta(seconds=1)) == [job]

    async def test_a_pending_priority_job_turns_the_plain_statement_off(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        await create(adapter, new_root(), new_root(priority=-5))
        assert raw_claim(db_path, T0 + timedelta(seconds=1)) == []

    async def test_the_plain_statement_skips_paused_types(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        await create(adapter, new_root())
        async with adapter.transaction() as tx:
            await tx.types_pause(TypesPause(type_names=["t"], now=T0))
        assert raw_claim(db_path, T0 + timedelta(seconds=1)) == []

    async def test_priority_zero_jobs_never_enter_the_priority_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        await create(adapter, new_root(), new_root(), new_root(priority=3))
        with sqlite3.connect(db_path) as conn:
            [(entries,)] = conn.execute(
                "SELECT COUNT(*) FROM jobchain_job INDEXED BY jobchain_job_priority_idx"
                " WHERE status = 'pending' AND priority <> 0"
            ).fetchall()
        conn.close()
        assert entries == 1

    async def test_the_general_claim_takes_over_and_orders_by_priority(
        self, adapter: SqliteStateAdapter
    ) -> None:
        low, plain, high = await create(adapter, new_root(priority=-1), new_root(), new_root(priority=9))
        async with adapter.transaction() as tx:
            acquired = await tx.jobs_acquire(claim(limit=3))
        assert [job.id for job in acquired.jobs] == [high, plain, low]
        assert [job.priority for job in acquired.jobs] == [9, 0, -1]


class TestPlans:
    """The new statements read indexes, never the whole job table."""

    def test_the_plain_claim_keeps_its_index_and_reads_the_guard_from_the_priority_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        text = plan(db_path, Q.jobs_acquire)
        assert "SEARCH c USING INDEX jobchain_job_acquisition_idx (type_name=? AND scheduled_at<?)" in text
        assert "SEARCH g USING INDEX jobchain_job_priority_idx (type_name=?)" in text
        assert "SCAN jobchain_job" not in text

    def test_the_candidates_come_from_the_acquisition_and_priority_indexes(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        text = plan(db_path, Q.jobs_acquire_candidates)
        assert "SEARCH x USING INDEX jobchain_job_acquisition_idx (type_name=? AND scheduled_at<?)" in text
        assert "SEARCH x USING INDEX jobchain_job_priority_idx (type_name=? AND priority>?)" in text
        assert "SEARCH x USING INDEX jobchain_job_priority_idx (type_name=? AND priority<?)" in text
        assert "SEARCH r USING INDEX jobchain_job_expired_lease_idx (type_name=? AND leased_until>?)" in text
        assert not re.search(r"SCAN (j|x|r)\b", text)

    def test_ordering_keys_are_read_and_forgotten_by_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        assert "SEARCH o USING PRIMARY KEY (key=?)" in plan(db_path, Q.jobs_create_lookup)
        forget = plan(db_path, Q.ordering_keys_forget)
        assert "jobchain_ordering_key_last_chain_idx (last_chain_id=?)" in forget

    def test_waits_read_blockers_by_primary_key(self, adapter: SqliteStateAdapter, db_path: Path) -> None:
        text = plan(db_path, Q.job_wait_lookup)
        assert "SCAN o" not in text
        assert "jobchain_job_chain_index_idx" in text


@pytest.fixture
async def second(db_path: Path, adapter: SqliteStateAdapter) -> AsyncIterator[SqliteStateAdapter]:
    """Another adapter on the same file: its own writer connection, as another process has."""
    other = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    yield other
    await other.close()


class TestTwoConnections:
    async def test_chains_of_one_key_started_from_two_connections_queue_behind_each_other(
        self, adapter: SqliteStateAdapter, second: SqliteStateAdapter
    ) -> None:
        async def start(state: SqliteStateAdapter, n: int) -> tuple[str, str | None]:
            async with state.transaction() as tx:
                [created] = await tx.jobs_create(
                    JobsCreate(jobs=[new_root(ordering_key="k", input=n)], now=T0 + timedelta(seconds=n))
                )
            return created.job.id, created.ordered_after

        results = await asyncio.gather(*(start((adapter, second)[n % 2], n) for n in range(20)))
        after = {job_id: previous for job_id, previous in results}
        firsts = [job_id for job_id, previous in results if previous is None]
        assert len(firsts) == 1
        assert len(set(after.values())) == 20  # each chain follows a different one: a single line
        order = [firsts[0]]
        following = {previous: job_id for job_id, previous in after.items()}
        while order[-1] in following:
            order.append(following[order[-1]])
        assert len(order) == 20
        # Only the first is claimable; each next one once the previous chain is terminal.
        for expected in order:
            async with second.transaction() as tx:
                acquired = await tx.jobs_acquire(
                    JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=5, now=T0 + LEASE)
                )
                assert [job.id for job in acquired.jobs] == [expected]
                await tx.job_complete(JobComplete(job_id=expected, worker_id="w", now=T0 + LEASE))

    async def test_max_running_holds_across_two_connections(
        self, adapter: SqliteStateAdapter, second: SqliteStateAdapter
    ) -> None:
        await create(adapter, *(new_root() for _ in range(30)))
        limits = {"t": TypeLimits(max_running=3)}

        async def grab(state: SqliteStateAdapter) -> int:
            async with state.transaction() as tx:
                acquired = await tx.jobs_acquire(claim(limit=2, type_limits=limits))
            return len(acquired.jobs)

        counts = await asyncio.gather(*(grab((adapter, second)[n % 2]) for n in range(12)))
        assert sum(counts) == 3
        with sqlite3.connect(adapter.options.path) as conn:
            [(running,)] = conn.execute(
                "SELECT COUNT(*) FROM jobchain_job WHERE status = 'running'"
            ).fetchall()
        conn.close()
        assert running == 3

    async def test_a_rate_window_is_shared_by_two_connections(
        self, adapter: SqliteStateAdapter, second: SqliteStateAdapter
    ) -> None:
        await create(adapter, *(new_root() for _ in range(30)))
        limits = {"t": TypeLimits(rate_limit=RateLimit(limit=4, per=timedelta(minutes=1)))}

        async def grab(state: SqliteStateAdapter) -> int:
            async with state.transaction() as tx:
                acquired = await tx.jobs_acquire(claim(limit=3, type_limits=limits))
                for job in acquired.jobs:  # finishing gives no rate back
                    await tx.job_complete(
                        JobComplete(job_id=job.id, worker_id="w", now=T0 + timedelta(seconds=1))
                    )
            return len(acquired.jobs)

        counts = await asyncio.gather(*(grab((adapter, second)[n % 2]) for n in range(10)))
        assert sum(counts) == 4
        with sqlite3.connect(adapter.options.path) as conn:
            rows = conn.execute(
                "SELECT rate_window_start, rate_window_count FROM jobchain_type_control"
            ).fetchall()
        conn.close()
        assert rows == [("2030-01-01T12:00:00.000000Z", 4)]


class TestOrderingRows:
    async def test_deleting_a_keys_last_chain_deletes_its_row_and_the_next_chain_follows_none(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        [first] = await create(adapter, new_root(ordering_key="k"))
        async with adapter.transaction() as tx:
            await tx.chains_delete(ChainsDelete(chain_ids=[first]))
        with sqlite3.connect(db_path) as conn:
            assert conn.execute("SELECT COUNT(*) FROM jobchain_ordering_key").fetchall() == [(0,)]
        conn.close()
        async with adapter.transaction() as tx:
            [created] = await tx.jobs_create(JobsCreate(jobs=[new_root(ordering_key="k")], now=T0))
        assert (created.ordered_after, created.job.status) == (None, JobStatus.PENDING)

    async def test_prune_with_locks_before_sweeps_rows_whose_chain_is_gone(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        await create(adapter, new_root(ordering_key="k"))
        with sqlite3.connect(db_path) as conn:  # a row left behind by another path
            conn.execute(
                "INSERT INTO jobchain_ordering_key VALUES ('gone', ?, NULL, '2029-01-01T00:00:00.000000Z')",
                (new_id(),),
            )
        conn.close()
        async with adapter.transaction() as tx:
            pruned = await tx.chains_prune(ChainsPrune(locks_before=T0))
            assert pruned.locks_deleted == 1
            assert (await tx.chains_prune(ChainsPrune(locks_before=T0))).locks_deleted == 0

    async def test_the_implicit_blocker_is_stored_as_resolved_by_any_end(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        first, second = await create(adapter, new_root(ordering_key="k"), new_root(ordering_key="k"))
        with sqlite3.connect(db_path) as conn:
            rows = conn.execute(
                "SELECT job_id, blocked_by_chain_id, idx, resolves_on_any_end FROM jobchain_job_blocker"
            ).fetchall()
        conn.close()
        assert rows == [(second, first, 0, 1)]
        async with adapter.transaction() as tx:
            assert [c.id for c in await tx.job_blockers_get(JobBlockersGet(job_id=second))] == [first]


class TestResolvedByAnyEnd:
    """A blocker row with resolves_on_any_end (an ordering predecessor) through failure,
    propagation, retry and unblocking, beside a declared blocker that does fail the job."""

    async def test_a_failed_predecessor_never_fails_or_holds_the_job_its_declared_blocker_does(
        self, adapter: SqliteStateAdapter
    ) -> None:
        predecessor, declared = await create(adapter, new_root("p", ordering_key="k"), new_root("d"))
        [successor] = await create(adapter, new_root("s", ordering_key="k", blocker_chain_ids=[declared]))
        later = T0 + timedelta(seconds=5)

        async def run_and_fail(job_id: str, type_name: str) -> list[str]:
            async with adapter.transaction() as tx:
                await tx.jobs_acquire(
                    JobsAcquire(type_names=[type_name], worker_id="w", lease_for=LEASE, now=later)
                )
                failed = await tx.job_fail(JobFail(job_id=job_id, error="boom", worker_id="w", now=later))
            return [job.id for job in failed.failed_jobs]

        assert await run_and_fail(predecessor, "p") == []  # resolved, but the declared one is open
        assert await run_and_fail(declared, "d") == [successor]
        async with adapter.transaction() as tx:
            failed = await tx.job_get(JobGet(job_id=successor))
            assert failed is not None
            assert failed.failed_by_chain_id == declared
            retried = await tx.jobs_retry(JobsRetry(job_ids=[declared], now=later))
            assert [job.id for job in retried.reblocked] == [successor]  # the predecessor does not keep it
            await tx.jobs_acquire(JobsAcquire(type_names=["d"], worker_id="w", lease_for=LEASE, now=later))
            completed = await tx.job_complete(JobComplete(job_id=declared, worker_id="w", now=later))
        assert [job.id for job in completed.unblocked_jobs] == [successor]
