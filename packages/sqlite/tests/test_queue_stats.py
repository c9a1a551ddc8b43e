"""queue_stats and jobs_list(leased_by=) on SQLite beyond the conformance suite: the figures
agree with the memory reference over mixed histories, durations are exact across day and
year ends, each statement's plan reads indexes only (never the job table), the migration
indexes a 0005 database's rows, and a caller's own connection serves the read."""

from __future__ import annotations

import random
import re
import sqlite3
import uuid
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
import pytest

from jobchain.contracts import JobsList, QueueStatsGet, StateAdapter
from jobchain.entities import JobStatus, Schedule, new_id
from jobchain.memory.state import MemoryStateAdapter
from jobchain.stats import QueueStats
from jobchain_conformance.helpers import (
    acquire,
    attempt_error,
    cancel,
    complete,
    fail,
    queue_stats,
    start,
)
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
STATS_AT = T0 + timedelta(hours=1)
TYPES = ("alpha", "beta", "gamma")
ERRORS = ("TimeoutError", "ValueError", "KeyError", None)
NEW_INDEXES = (
    "jobchain_job_blocked_type_idx",
    "jobchain_job_completed_type_idx",
    "jobchain_job_failed_type_idx",
    "jobchain_job_cancelled_type_idx",
)


async def mixed_history(adapter: StateAdapter, seed: int, count: int = 120) -> None:
    """Jobs of three types in every status, written with explicit times: claims and finishes
    spread over [T0, T0 + 50 min], many finishing exactly on a window's edge (so at the same
    instant: sample tie-breaks), a backlog due only by STATS_AT (so no claim ever picks it),
    leases that expire by then."""
    rng = random.Random(seed)

    def next_id() -> str:  # the same ids on every adapter given the seed: tie-breaks compare ids
        return str(uuid.UUID(int=rng.getrandbits(128)))

    for index in range(count):
        at = T0 + timedelta(seconds=index * 25)
        type_name = rng.choice(TYPES)
        fate = rng.choice(
            ["due", "later", "blocked", "running", "completed", "failed", "cancelled"] + ["claimed"] * 3
        )
        if fate in ("due", "later", "blocked"):
            offset = -rng.randint(1, 300) if fate != "later" else rng.randint(1, 300)
            due_at = STATS_AT + timedelta(seconds=offset)
            job = await start(
                adapter, now=at, type_name=type_name, id=next_id(), schedule=Schedule(at=due_at)
            )
            if fate == "blocked":
                await start(adapter, now=at, type_name=type_name, id=next_id(), blocker_chain_ids=[job.id])
            continue
        job = await start(adapter, now=at, type_name=type_name, id=next_id())
        finished = at + timedelta(microseconds=rng.randint(0, 90_000_000))
        boundaries = [STATS_AT - timedelta(minutes=m) for m in (1, 5, 15, 20)]
        if rng.random() < 0.5 and boundaries[-1] >= at:  # on a window's edge, many at one instant
            finished = rng.choice(boundaries)
        if fate in ("running", "claimed"):
            lease = timedelta(minutes=rng.choice([1, 120]))
            [claimed] = (await acquire(adapter, now=at, type_names=[type_name], lease_for=lease)).jobs
            assert claimed.id == job.id
            if fate == "claimed":
                await complete(
                    adapter,
                    job.id,
                    now=finished,
                    worker_id=claimed.leased_by,
                    lease_generation=claimed.lease_generation,
                )
        elif fate == "completed":  # workerless: no claim, so no duration
            await complete(adapter, job.id, now=finished)
        elif fate == "failed":
            error_type = rng.choice(ERRORS)
            entry = None if error_type is None else attempt_error(1, at=finished, error_type=error_type)
            await fail(adapter, job.id, now=finished, attempt_error=entry)
        else:
            await cancel(adapter, [job.chain_id], now=finished)


def ordered(stats: QueueStats) -> list[object]:
    """The figures with the error types as an ordered list (dict equality ignores order)."""
    return [stats, [list(t.failed_by_error_type.items()) for t in stats.types]]


class TestAgreementWithTheMemoryReference:
    @pytest.mark.parametrize("seed", [1, 2, 3, 4])
    async def test_every_figure_matches_the_memory_adapter(
        self, adapter: SqliteStateAdapter, seed: int
    ) -> None:
        memory = MemoryStateAdapter()
        for state in (memory, adapter):
            await mixed_history(state, seed)
        for params in (
            dict(
                duration_sample=2,
                duration_window=timedelta(hours=1),
                throughput_window=timedelta(hours=1),
                throughput_step=timedelta(minutes=7),
            ),
            dict(duration_window=timedelta(minutes=20), duration_sample=5),
            dict(
                type_names=["beta", "delta"],
                windows=[timedelta(minutes=20)],
                duration_window=timedelta(hours=1),
            ),
            dict(duration_sample=0, windows=[]),
        ):
            expected = await queue_stats(memory, now=STATS_AT, **params)  # type: ignore[arg-type]
            actual = await queue_stats(adapter, now=STATS_AT, **params)  # type: ignore[arg-type]
            assert ordered(actual) == ordered(expected)


class TestDurations:
    async def test_durations_are_exact_to_the_microsecond_across_midnight_and_a_year_end(
        self, adapter: SqliteStateAdapter
    ) -> None:
        claimed_at = datetime(2030, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
        spans = [timedelta(microseconds=2), timedelta(days=3, hours=4, minutes=5, seconds=6, microseconds=7)]
        for span in spans:
            job = await start(adapter, now=claimed_at, type_name="t")
            [claimed] = (await acquire(adapter, now=claimed_at, type_names=["t"])).jobs
            assert claimed.id == job.id
            await complete(
                adapter,
                job.id,
                now=claimed_at + span,
                worker_id=claimed.leased_by,
                lease_generation=claimed.lease_generation,
            )
        stats = await queue_stats(
            adapter, now=claimed_at + timedelta(days=4), duration_window=timedelta(days=5)
        )
        durations = stats.get("t").durations
        assert durations is not None
        assert (durations.count, durations.p50, durations.max) == (2, spans[0], spans[1])


class TestPlans:
    """Every figure is read from an index: no statement scans the job table."""

    @staticmethod
    def plan(db_path: Path, sql: str) -> list[str]:
        params = dict.fromkeys(re.findall(r":(\w+)", sql), "[]")
        with sqlite3.connect(db_path) as conn:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        conn.close()
        return [str(row[-1]) for row in rows]

    @staticmethod
    def table_scans(plan: list[str], ctes: set[str]) -> list[str]:
        """SCAN lines that walk the job table or a whole index of it (not a CTE or json_each)."""
        return [
            line
            for line in plan
            if line.startswith("SCAN ")
            and "VIRTUAL TABLE" not in line
            and "COVERING INDEX" not in line
            and line.split()[1] not in ctes
        ]

    async def test_each_per_type_figure_searches_its_own_partial_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        plan = self.plan(db_path, queries("jobchain_").queue_stats)
        # tc: type_control, one row per paused or rate-limited type (the paused types listed)
        assert self.table_scans(plan, {"s", "seen", "t", "e", "d", "tc"}) == []
        assert "SEARCH tc USING PRIMARY KEY (type_name=?)" in plan
        for expected in (
            "SEARCH jobchain_job USING COVERING INDEX jobchain_job_listing_type_name_idx",  # MIN: first type
            "SEARCH n USING COVERING INDEX jobchain_job_listing_type_name_idx (type_name>?)",  # the next one
            "SEARCH b USING INDEX jobchain_job_blocked_type_idx (type_name=?)",
            "SEARCH pe USING INDEX jobchain_job_acquisition_idx (type_name=?)",
            "SEARCH pe USING INDEX jobchain_job_acquisition_idx (type_name=? AND scheduled_at<?)",
            "SEARCH r USING INDEX jobchain_job_expired_lease_idx (type_name=? AND leased_until>?)",
            "SEARCH r USING INDEX jobchain_job_expired_lease_idx"
            " (type_name=? AND leased_until>? AND leased_until<?)",
            "SEARCH c USING INDEX jobchain_job_completed_type_idx (type_name=?)",
            "SEARCH c USING INDEX jobchain_job_completed_type_idx (type_name=? AND completed_at>?)",
            "SEARCH f USING INDEX jobchain_job_failed_type_idx (type_name=?)",
            "SEARCH f USING INDEX jobchain_job_failed_idx (failed_at>?)",
            "SEARCH x USING INDEX jobchain_job_cancelled_type_idx (type_name=?)",
            "SEARCH x USING INDEX jobchain_job_cancelled_type_idx (type_name=? AND cancelled_at>?)",
        ):
            assert expected in plan

    async def test_failures_by_error_type_are_grouped_in_index_order_without_a_sort(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        # A sort would evaluate json_extract on every failed row read from the table.
        plan = self.plan(db_path, queries("jobchain_").queue_stats)
        assert not any("GROUP BY" in line for line in plan)

    async def test_throughput_reads_ranges_of_the_completed_and_failed_indexes(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        plan = self.plan(db_path, queries("jobchain_").queue_stats_throughput)
        assert self.table_scans(plan, {"s", "seen", "t"}) == []
        completed = "SEARCH c USING INDEX jobchain_job_completed_type_idx"
        assert f"{completed} (type_name=? AND completed_at>? AND completed_at<?)" in plan
        assert "SEARCH f USING INDEX jobchain_job_failed_idx (failed_at>? AND failed_at<?)" in plan

    @pytest.mark.parametrize("order", ["asc", "desc"])
    async def test_leased_by_listing_starts_from_the_running_jobs(
        self, adapter: SqliteStateAdapter, db_path: Path, order: str
    ) -> None:
        plan = self.plan(db_path, queries("jobchain_").listing("jobs_list_leased", order))  # type: ignore[arg-type]
        assert plan[0] == "SCAN j USING INDEX jobchain_job_expired_lease_idx"
        assert not any("jobchain_job_listing_idx" in line for line in plan)

    async def test_no_other_statement_uses_the_new_indexes(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        """They serve queue_stats only: every other plan is what it was before 0006."""
        q = queries("jobchain_")
        for field in fields(q):
            if field.name.startswith(("queue_stats", "migration_")):
                continue
            plan = "\n".join(self.plan(db_path, getattr(q, field.name)))
            assert not any(index in plan for index in NEW_INDEXES), field.name


def migrate_to(path: Path, last: str) -> None:
    """Apply the migrations up to ``last`` by hand, as an older library version did."""
    q = queries("jobchain_")
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index(last) + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": "2029-01-01T00:00:00.000000Z"})
    conn.close()


def seed_0005(path: Path) -> None:
    """A 0005 database holding rows of every status, failed ones with and without errors."""
    migrate_to(path, "0005_job_lifecycle")
    error = '[{"attempt":1,"worker_id":null,"error_type":"%s","message":"m","traceback":null,"at":"x"}]'
    rows = [
        ("blocked", None, None, None, None, None),
        ("pending", None, None, None, None, None),
        ("running", "2030-01-01T12:00:30.000000Z", None, None, None, None),
        ("completed", None, "2030-01-01T11:59:30.000000Z", None, None, None),
        ("completed", None, "2029-12-31T12:00:00.000000Z", None, None, None),
        ("failed", None, None, "2030-01-01T11:59:00.000000Z", None, error % "TimeoutError"),
        ("failed", None, None, "2030-01-01T11:00:00.000000Z", None, error % "TimeoutError"),
        ("failed", None, None, "2030-01-01T11:00:00.000000Z", None, None),
        ("cancelled", None, None, None, "2030-01-01T11:58:00.000000Z", None),
    ]
    with sqlite3.connect(path) as conn:
        for status, leased_until, completed_at, failed_at, cancelled_at, errors in rows:
            job_id = new_id()
            conn.execute(
                "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
                " created_at, scheduled_at, leased_by, leased_until, completed_at, failed_at, cancelled_at,"
                " attempt_errors) VALUES (?, 't', ?, 't', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    job_id,
                    status,
                    "2029-12-31T00:00:00.000000Z",
                    "2029-12-31T00:00:00.000000Z",
                    "w" if leased_until else None,
                    leased_until,
                    completed_at,
                    failed_at,
                    cancelled_at,
                    errors,
                ),
            )
    conn.close()


def dump(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


class TestUpgradeFrom0005:
    async def test_the_migration_indexes_the_rows_already_there(self, tmp_path: Path) -> None:
        path = tmp_path / "old.db"
        seed_0005(path)
        jobs_before = dump(path, "SELECT * FROM jobchain_job ORDER BY id")
        adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
        try:
            await adapter.migrate()
            stats = await queue_stats(adapter, now=T0, throughput_window=timedelta(hours=2))
        finally:
            await adapter.close()
        after = dump(path, "SELECT * FROM jobchain_job ORDER BY id")
        assert [row[: len(jobs_before[0])] for row in after] == jobs_before  # 0007 added columns
        assert dump(path, "PRAGMA integrity_check") == [("ok",)]
        [t] = stats.types
        assert (t.blocked, t.pending, t.due, t.running, t.expired_leases) == (1, 1, 1, 1, 0)
        assert (t.completed, t.failed, t.cancelled) == (2, 3, 1)
        assert list(t.failed_by_error_type.items()) == [("TimeoutError", 2), ("", 1)]
        assert [(w.completed, w.failed, w.cancelled) for w in t.recent] == [(1, 1, 0), (1, 1, 1), (1, 1, 1)]
        assert sum(bucket.completed for bucket in stats.throughput) == 1
        assert sum(bucket.failed for bucket in stats.throughput) == 3

    async def test_a_fresh_database_and_one_upgraded_from_0005_have_the_same_schema(
        self, tmp_path: Path
    ) -> None:
        fresh, upgraded = tmp_path / "fresh.db", tmp_path / "upgraded.db"
        seed_0005(upgraded)
        for path in (fresh, upgraded):
            adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
            await adapter.migrate()
            await adapter.close()
        query = (
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'jobchain_%' ORDER BY name"
        )
        assert dump(fresh, query) == dump(upgraded, query)
        assert set(NEW_INDEXES) <= {row[1] for row in dump(fresh, query) if row[0] == "index"}


class TestCallersConnection:
    async def test_queue_stats_and_leased_by_run_on_a_callers_aiosqlite_connection(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        job = await start(adapter, now=T0, type_name="t")
        [claimed] = (await acquire(adapter, now=T0, type_names=["t"])).jobs
        assert claimed.leased_by is not None
        async with aiosqlite.connect(db_path) as conn:  # rows come back as dicts here
            async with adapter.transaction(connection=conn, read_only=True) as tx:
                stats = await tx.queue_stats(QueueStatsGet(now=T0 + timedelta(minutes=10)))
                held = await tx.jobs_list(JobsList(leased_by=[claimed.leased_by]))
        assert (stats.get("t").running, stats.get("t").expired_leases) == (1, 1)
        assert [(j.id, j.status) for j in held.items] == [(job.id, JobStatus.RUNNING)]
