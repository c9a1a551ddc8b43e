"""The claim's plans with the scheduling controls (EXPLAIN, never timings): every claim statement
reads job_acquisition_idx and job_priority_idx in index order, never scans the job table and never
sorts more than its two prefixes per type; and each operation is one round trip."""

from __future__ import annotations

import re
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

from jobchain.contracts import JobNextAvailable, JobsAcquire, JobsCreate, NewJob, QueueStatsGet
from jobchain.contracts.scheduling import (
    PausedTypesList,
    ScheduleRegistration,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.entities import RateLimit, TypeLimits, new_id
from jobchain_postgres import PostgresStateAdapter
from jobchain_postgres.queries import Queries

from .test_statements import CountingCursor, counted, round_trips, statements  # noqa: F401 (fixture)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TYPES = ["type1", "type2"]
LIMIT = 10

CLAIMS = ["jobs_acquire", "jobs_acquire_atomic", "jobs_acquire_limited", "jobs_acquire_atomic_limited"]


def new(type_name: str, **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


def claim_params(name: str) -> dict[str, Any]:
    params: dict[str, Any] = {
        "type_names": TYPES,
        "limit": LIMIT,
        "worker_id": "w",
        "leases": [LEASE, LEASE],
        "now": NOW,
        "aging": timedelta(minutes=1),
    }
    if name.endswith("_limited"):
        params.update(max_running=[50, None], rate_limits=[None, 40], rate_pers=[None, 60_000_000])
    return params


@pytest.fixture
async def seeded(pg_state: PostgresStateAdapter) -> PostgresStateAdapter:
    """5,000 pending jobs of five types, one in seven with a priority, some due long ago, plus
    running jobs: a pending set far larger than what one claim may sort."""
    jobs: list[NewJob] = []
    for n in range(5000):
        priority = (n % 5) * 10 - 20 if n % 7 == 0 else 0
        jobs.append(new(f"type{n % 5}", priority=priority))
    async with pg_state.transaction() as tx:
        for start in range(0, len(jobs), 1000):
            await tx.jobs_create(JobsCreate(jobs=jobs[start : start + 1000], now=NOW - timedelta(hours=1)))
        for n in range(5):
            await tx.jobs_acquire(
                JobsAcquire(type_names=[f"type{n}"], worker_id="w", lease_for=LEASE, limit=10, now=NOW)
            )
        await tx.connection.execute(
            sql.SQL("ANALYZE {}").format(sql.Identifier(pg_state.options.schema, "jobchain_job"))
        )
    return pg_state


class _RollbackError(Exception):
    """Raised to roll back the transaction of an EXPLAIN ANALYZE (the claim writes)."""


async def explain(adapter: PostgresStateAdapter, query: bytes, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE with sequential scans discouraged; what the statement wrote is rolled back."""
    text = ""
    with suppress(_RollbackError):
        async with adapter.transaction() as tx:
            connection = tx.connection
            await connection.execute("SET LOCAL enable_seqscan = off")
            cursor = connection.cursor()
            await cursor.execute(b"EXPLAIN (ANALYZE, COSTS OFF) " + query, params, prepare=False)
            text = "\n".join(row[0] for row in await cursor.fetchall())
            raise _RollbackError
    return text


@pytest.mark.parametrize("name", CLAIMS)
async def test_claims_read_both_indexes_in_order_and_sort_only_the_prefixes(
    seeded: PostgresStateAdapter, name: str
) -> None:
    text = await explain(
        seeded, getattr(Queries(seeded.options.schema, "jobchain_"), name), claim_params(name)
    )
    assert "jobchain_job_acquisition_idx" in text, text
    assert "jobchain_job_priority_idx" in text, text
    assert not re.search(r"Seq Scan on jobchain_job\b", text), text
    # Every sort is of the candidates (at most two prefixes of LIMIT rows per type), never of
    # the pending set: the rows entering each Sort node stay within that bound.
    sorted_rows = [int(rows) for rows in re.findall(r"Sort \(actual time=\S+ rows=(\d+)", text)]
    assert sorted_rows, text
    assert max(sorted_rows) <= 2 * LIMIT * len(TYPES), text
    for line in text.splitlines():
        if "Sort Key:" in line:
            assert not re.search(r"\bj(_\d+)?\.", line), line  # no sort on a job-table alias


@pytest.fixture
async def seeded_fifo(pg_state: PostgresStateAdapter) -> PostgresStateAdapter:
    """5,000 pending jobs of five types, none with a priority: the plain claim's case."""
    jobs = [new(f"type{n % 5}") for n in range(5000)]
    async with pg_state.transaction() as tx:
        for start in range(0, len(jobs), 1000):
            await tx.jobs_create(JobsCreate(jobs=jobs[start : start + 1000], now=NOW - timedelta(hours=1)))
        await tx.connection.execute(
            sql.SQL("ANALYZE {}").format(sql.Identifier(pg_state.options.schema, "jobchain_job"))
        )
    return pg_state


@pytest.mark.parametrize("name", ["jobs_acquire_plain", "jobs_acquire_atomic_plain"])
async def test_the_plain_claims_read_the_fifo_index_in_order_and_probe_priorities(
    seeded_fifo: PostgresStateAdapter, name: str
) -> None:
    q = Queries(seeded_fifo.options.schema, "jobchain_")
    text = await explain(seeded_fifo, getattr(q, name), claim_params(name))
    assert "jobchain_job_acquisition_idx" in text, text
    assert "jobchain_job_priority_idx" in text, text  # the probe: is any priority in play?
    assert not re.search(r"Seq Scan on jobchain_job\b", text), text
    sorted_rows = [int(rows) for rows in re.findall(r"Sort \(actual time=\S+ rows=(\d+)", text)]
    assert max(sorted_rows, default=0) <= LIMIT * len(TYPES), text
    claimed = re.search(r"Update on jobchain_job \w+ \(actual time=\S+ rows=(\d+)", text)
    assert claimed is not None, text
    assert int(claimed.group(1)) == LIMIT, text


async def test_next_available_and_queue_stats_read_the_pause_by_key(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await explain(seeded, q.job_next_available, {"type_names": TYPES, "now": NOW})
    assert "jobchain_job_acquisition_idx" in text
    assert "jobchain_type_control_pkey" in text


# ---------------------------------------------------------------- round trips


async def test_a_limited_claim_is_one_pipeline_and_a_plain_one_one_statement(
    counted: PostgresStateAdapter,  # noqa: F811 (the fixture)
) -> None:
    adapter = counted
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[new("a"), new("b")], now=NOW))
    plain = JobsAcquire(type_names=["a", "b"], worker_id="w", lease_for=LEASE, now=NOW)
    limited = JobsAcquire(
        type_names=["a", "b"],
        worker_id="w",
        lease_for=LEASE,
        now=NOW,
        type_limits={"a": TypeLimits(max_running=3), "b": TypeLimits(rate_limit=RateLimit(2, timedelta(1)))},
    )
    # No priority in play: the FIFO statement of before priorities, alone.
    sent = await statements(adapter, lambda tx: tx.jobs_acquire(plain))
    assert round_trips(sent) == [["jobs_acquire_plain"]]
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[new("a", priority=5), new("b")], now=NOW))
    # A due job with a priority: the plain statement says so and claims nothing; the merging
    # statement claims, and the next claims go straight to it.
    sent = await statements(adapter, lambda tx: tx.jobs_acquire(plain))
    assert round_trips(sent) == [["jobs_acquire_plain"], ["jobs_acquire"]]
    sent = await statements(adapter, lambda tx: tx.jobs_acquire(plain))
    assert round_trips(sent) == [["jobs_acquire"]]
    sent = await statements(adapter, lambda tx: tx.jobs_acquire(limited))
    assert round_trips(sent) == [["type_control_lock", "jobs_acquire_limited"]]
    # In autocommit too: the pipeline's single Sync makes lock and claim one transaction.
    CountingCursor.sent.clear()
    CountingCursor.pipelined.clear()
    async with adapter.autocommit() as tx:
        await tx.jobs_acquire(limited)
    names = [s.decode().splitlines()[0] for s in CountingCursor.sent]
    assert round_trips(names) == [["type_control_lock", "jobs_acquire_limited"]]


async def test_pause_and_schedule_operations_send_one_statement_each(
    counted: PostgresStateAdapter,  # noqa: F811 (the fixture)
) -> None:
    adapter = counted
    registration = ScheduleRegistration(
        name="nightly", cron="0 3 * * *", timezone="UTC", type_name="t", catch_up=True, worker_name="w"
    )
    operations = {
        "types_pause": lambda tx: tx.types_pause(TypesPause(type_names=["t"], now=NOW)),
        "paused_types_list": lambda tx: tx.paused_types_list(PausedTypesList()),
        "schedules_register": lambda tx: tx.schedules_register(
            SchedulesRegister(schedules=[registration], forget_before=NOW, now=NOW)
        ),
        "schedules_list": lambda tx: tx.schedules_list(SchedulesList()),
        "job_next_available": lambda tx: tx.job_next_available(JobNextAvailable(type_names=["t"], now=NOW)),
    }
    for name, op in operations.items():
        sent = await statements(adapter, op)
        assert round_trips(sent) == [[name]], name
    sent = await statements(adapter, lambda tx: tx.queue_stats(QueueStatsGet(now=NOW)))
    assert round_trips(sent) == [["jit_off", "queue_stats", "jit_restore"]]
