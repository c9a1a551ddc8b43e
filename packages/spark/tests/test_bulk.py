"""Bulk start: exactly once per row under task failures, worker deaths and full re-runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest
import sparkkit

from jobchain.plugins import BackendSpec, register, unregister
from jobchain_spark import start_chains
from jobchain_spark.bulk import build_settings
from jobchain_spark.bulk_partition import start_partition
from jobchain_spark.faults import Faults

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROWS = 120


def _emails(spark: Any, count: int = ROWS, partitions: int = 4) -> Any:
    rows = [(f"order-{i:04d}", f"user{i}@example.com", f"receipt {i}", i % 3) for i in range(count)]
    df = spark.createDataFrame(rows, "order_id string, to string, subject string, priority int")
    return df.repartition(partitions, "order_id")


def _partition_sizes(df: Any) -> list[int]:
    return [
        n for _, n in sorted(df.rdd.mapPartitionsWithIndex(lambda i, it: [(i, sum(1 for _ in it))]).collect())
    ]


def _chains(url: str) -> dict[str, int]:
    return asyncio.run(sparkkit.count_chains(url, "send_email"))


def test_task_failures_and_a_rerun_start_every_row_exactly_once(spark: Any, state_url: str) -> None:
    sqlite_url = state_url
    df = _emails(spark)
    sizes = _partition_sizes(df)
    # Partitions 0 and 2 commit, then their task fails (a worker dying after commit); partition 1
    # fails mid-transaction (rolled back). Spark retries each; the retries must not double anything.
    faults = Faults.at("after_commit", partitions=[0, 2]).plus("before_commit", partitions=[1])
    result = start_chains(
        df, url=sqlite_url, job_type="send_email", job_types=sparkkit.types, key="order_id", faults=faults
    )
    assert (result.rows, result.started + result.deduplicated, result.rejected) == (ROWS, ROWS, 0)
    # The retried partitions found their rows already started (after_commit fired first).
    assert result.deduplicated == sizes[0] + sizes[2]
    chains = _chains(sqlite_url)
    assert len(chains) == ROWS
    assert set(chains.values()) == {1}
    assert set(chains) == {f"order-{i:04d}" for i in range(ROWS)}

    again = start_chains(df, url=sqlite_url, job_type="send_email", job_types=sparkkit.types, key="order_id")
    assert (again.started, again.deduplicated) == (0, ROWS)
    assert _chains(sqlite_url) == chains


def test_a_worker_process_dying_mid_partition_loses_and_doubles_nothing(spark: Any, sqlite_url: str) -> None:
    df = _emails(spark, 40, partitions=2)
    faults = Faults.at("mid_partition", "after_commit", partitions=[1], exit=True)
    result = start_chains(
        df, url=sqlite_url, job_type="send_email", job_types=sparkkit.types, key="order_id", faults=faults
    )
    assert result.started + result.deduplicated == 40
    chains = _chains(sqlite_url)
    assert len(chains) == 40
    assert set(chains.values()) == {1}


def test_the_data_source_form_is_exactly_once_across_retries_and_reruns(spark: Any, state_url: str) -> None:
    sqlite_url = state_url
    df = _emails(spark, 60, partitions=3)

    def save(faults: Faults | None) -> None:
        writer = (
            df.write.format("jobchain")
            .option("url", sqlite_url)
            .option("type", "send_email")
            .option("job_types", "sparkkit:types")
            .option("key", "order_id")
            .option("batch_size", "7")
        )
        if faults is not None:
            writer = writer.option("_faults", faults.to_json())
        writer.mode("append").save()

    save(Faults.at("mid_partition", "after_commit", partitions=[0, 1]))
    save(None)
    chains = _chains(sqlite_url)
    assert len(chains) == 60
    assert set(chains.values()) == {1}


def test_rows_without_a_key_column_are_keyed_by_their_input(spark: Any, sqlite_url: str) -> None:
    df = _emails(spark, 30, partitions=2).drop("order_id")
    first = start_chains(df, url=sqlite_url, job_type="send_email", job_types=sparkkit.types)
    second = start_chains(df, url=sqlite_url, job_type="send_email", job_types=sparkkit.types)
    assert (first.started, second.started, second.deduplicated) == (30, 0, 30)
    chains = _chains(sqlite_url)
    assert len(chains) == 30
    assert all(k.startswith("sha256:") for k in chains)


def test_a_partition_wakes_workers_once_with_its_count(spark: Any, sqlite_url: str) -> None:
    register(
        BackendSpec(
            scheme="recording", role="notify", distribution="tests", factory="sparkkit:open_recording_notify"
        )
    )
    try:
        df = _emails(spark, 25, partitions=1)
        settings = build_settings(
            df.schema,
            url=sqlite_url,
            job_type="send_email",
            job_types=sparkkit.types,
            key="order_id",
            notify="recording://",
            batch_size=10,
        )
        sparkkit.WAKES.clear()
        batches = [pa.RecordBatch.from_pandas(df.toPandas(), preserve_index=False)]
        result = start_partition(batches, settings, partition=0, attempt=0)
        assert result.started == 25
        assert sparkkit.WAKES == [("wake_hint", "send_email", 25), ("scheduled", "send_email", 1)]
    finally:
        unregister("recording", "notify")
