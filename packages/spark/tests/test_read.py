"""Reading the job history: splits, filter pushdown, and agreement with the client's listings."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, timedelta
from typing import Any

import pytest
import sparkkit
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In

from jobchain import JobTypes, connect
from jobchain.connect_backends import open_state
from jobchain_spark import (
    BackendNotInstalledError,
    SparkOptionError,
    UnknownTableError,
    UnsupportedBackendError,
    parse_json,
)
from jobchain_spark.reader import JobchainReader, ReadOptions

# Only the tests that use the session carry the spark marker (its xdist group): the others
# need no JVM and run on any worker.
pytestmark = pytest.mark.timeout(900)

T0 = sparkkit.T0


async def _seed(url: str) -> dict[str, Any]:
    """40 resize jobs over 4 hours (5 completed), 12 send_email, 2 jobs blocked by an email chain."""
    state = await open_state(url)
    try:
        first = await sparkkit.create(state, "resize", 1, T0)
        await sparkkit.run(
            state, first[0], started=T0 + timedelta(seconds=5), finished=T0 + timedelta(seconds=9)
        )
        for hour in range(4):
            await sparkkit.create(state, "resize", 10 if hour else 9, T0 + timedelta(hours=hour, minutes=1))
        emails = await sparkkit.create(
            state,
            "send_email",
            12,
            T0 + timedelta(hours=2, minutes=30),
            input={"to": "a@b.c", "subject": "s"},
        )
        blocked = await sparkkit.create(
            state, "notify_step", 2, T0 + timedelta(hours=5), blockers=(emails[0].id, emails[1].id)
        )
    finally:
        await state.close()
    return {"emails": emails, "blocked": blocked}


async def _client_jobs(url: str, **filters: Any) -> list[Any]:
    client = await connect(url, notify="none", job_types=JobTypes())
    try:
        jobs: list[Any] = []
        cursor = None
        while True:
            page = await client.list_jobs(cursor=cursor, limit=500, **filters)
            jobs.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                return jobs
    finally:
        await client.close()


def _read(spark: Any, url: str, table: str = "jobs", **options: Any) -> Any:
    reader = spark.read.format("jobchain").option("url", url).option("table", table)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


@pytest.fixture(scope="module")
def seeded(module_state_url: str) -> tuple[str, dict[str, Any]]:
    """The history of ``_seed``, written once per backend for the tests that only read it."""
    return module_state_url, asyncio.run(_seed(module_state_url))


@pytest.fixture
def own_seeded(state_url: str) -> tuple[str, dict[str, Any]]:
    """The same history in a state of this test alone (for a test that adds rows)."""
    return state_url, asyncio.run(_seed(state_url))


@pytest.mark.spark
@pytest.mark.parametrize("partitioning", ["id", "created_at"])
def test_read_jobs_matches_the_client_listing(spark: Any, seeded: Any, partitioning: str) -> None:
    url, _ = seeded
    df = _read(spark, url, partitioning=partitioning, partitions=3)
    assert df.rdd.getNumPartitions() == 3
    rows = {r["id"]: r for r in df.collect()}
    listed = asyncio.run(_client_jobs(url))
    assert len(rows) == len(listed) == 54
    for job in listed:
        row = rows[job.id]
        assert (row["type_name"], row["status"], row["chain_id"], row["attempt"]) == (
            job.type_name,
            job.status.value,
            job.chain_id,
            job.attempt,
        )
        # collect() gives naive datetimes in this process's local time zone: read them so.
        assert row["created_at"].astimezone(UTC) == job.created_at
        for column in ("first_attempt_at", "attempt_started_at"):
            value = row[column]
            assert (value if value is None else value.astimezone(UTC)) == getattr(job, column)
    done = [r for r in rows.values() if r["status"] == "completed"]
    assert len(done) == 1
    assert json.loads(done[0]["output"]) == {"ok": True}
    claimed = T0 + timedelta(seconds=5)
    assert done[0]["first_attempt_at"].astimezone(UTC) == claimed
    assert done[0]["attempt_started_at"].astimezone(UTC) == claimed
    assert sum(r["first_attempt_at"] is not None for r in rows.values()) == 1


@pytest.mark.spark
def test_read_chains_and_blockers(spark: Any, seeded: Any) -> None:
    url, seeds = seeded
    chains = _read(spark, url, "chains", partitioning="id", partitions=2).collect()
    assert len(chains) == 54
    assert {c["type_name"] for c in chains} == {"resize", "send_email", "notify_step"}
    blocked_ids = {j.id for j in seeds["blocked"]}
    assert {c["status"] for c in chains if c["id"] in blocked_ids} == {"blocked"}
    blockers = _read(spark, url, "blockers", partitions=2).collect()
    assert sorted((b["job_id"], b["blocked_by_chain_id"], b["position"]) for b in blockers) == sorted(
        (j.id, e.id, i) for j in seeds["blocked"] for i, e in enumerate(seeds["emails"][:2])
    )


@pytest.mark.spark
def test_filters_match_the_client_listing(spark: Any, seeded: Any) -> None:
    url, _ = seeded
    lo, hi = T0 + timedelta(hours=1), T0 + timedelta(hours=3)
    df = _read(spark, url, partitions=2)
    got = df.where((df.type_name == "resize") & (df.status == "pending"))
    got = got.where((df.created_at >= lo) & (df.created_at < hi))
    expected = asyncio.run(_client_jobs(url, type_names=["resize"], statuses=["pending"], created_from=lo))
    expected_ids = {j.id for j in expected if j.created_at < hi}
    assert {r["id"] for r in got.collect()} == expected_ids
    assert len(expected_ids) == 20


def test_the_reader_leaves_every_filter_to_spark(seeded: Any) -> None:
    # Spark 4.x reuses a DataFrame's last pushed-down plan for its later unfiltered queries
    # (test_read_queries.py), so the reader narrows nothing: Spark filters, per query.
    url, _ = seeded
    reader = JobchainReader(ReadOptions.parse({"url": url, "table": "jobs", "partitions": "1"}))
    filters = [
        GreaterThanOrEqual(("created_at",), T0 + timedelta(hours=2)),
        In(("status",), ("pending", "blocked")),
        EqualTo(("type_name",), "send_email"),
    ]
    assert list(reader.pushFilters(filters)) == filters
    [partition] = reader.partitions()
    assert sum(batch.num_rows for batch in reader.read(partition)) == 54


def test_open_ended_ranges_catch_rows_outside_the_planned_span(own_seeded: Any) -> None:
    url, _ = own_seeded
    reader = JobchainReader(ReadOptions.parse({"url": url, "table": "jobs", "partitions": "4"}))
    planned = reader.partitions()

    async def late_and_early() -> None:
        state = await open_state(url)
        try:
            await sparkkit.create(state, "resize", 3, T0 + timedelta(days=30))
            await sparkkit.create(state, "resize", 2, T0 - timedelta(days=30))
        finally:
            await state.close()

    asyncio.run(late_and_early())
    counts = [sum(b.num_rows for b in reader.read(p)) for p in planned]
    assert sum(counts) == 59
    assert counts[0] >= 2
    assert counts[-1] >= 3


@pytest.mark.spark
def test_parse_json_reads_inputs_with_a_schema(spark: Any, seeded: Any) -> None:
    url, _ = seeded
    df = _read(spark, url).where("type_name = 'send_email'")
    parsed = parse_json(df, "input", "to string, subject string", into="email").select("email.*").distinct()
    assert [tuple(r) for r in parsed.collect()] == [("a@b.c", "s")]


def test_bad_options_raise_typed_errors_naming_the_option(sqlite_url: str) -> None:
    with pytest.raises(UnknownTableError, match=r"'table'.*jobs, chains, blockers"):
        ReadOptions.parse({"url": sqlite_url, "table": "queue"})
    with pytest.raises(BackendNotInstalledError, match=r"'url'.*nosuch://"):
        ReadOptions.parse({"url": "nosuch://x/y"})
    with pytest.raises(UnsupportedBackendError, match=r"'url'.*memory://"):
        ReadOptions.parse({"url": "memory://"})
    with pytest.raises(SparkOptionError, match="'partitioning'"):
        ReadOptions.parse({"url": sqlite_url, "partitioning": "hash"})
    with pytest.raises(SparkOptionError, match="'partitions'"):
        ReadOptions.parse({"url": sqlite_url, "partitions": "0"})
    with pytest.raises(SparkOptionError, match=r"'url'.*required"):
        ReadOptions.parse({})


@pytest.mark.spark
def test_a_bad_table_option_fails_the_spark_read(spark: Any, sqlite_url: str) -> None:
    with pytest.raises(Exception, match=r"UnknownTableError|unknown table 'queue'"):
        _read(spark, sqlite_url, "queue").collect()
