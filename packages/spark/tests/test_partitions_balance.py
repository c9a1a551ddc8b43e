"""Balanced partitions for a burst of client-started chains after one old row (issue 15, item 2).

jobchain's ids are time-ordered (UUID version 7, one millisecond shared by a whole batch) and
a batched start gives every chain of the batch the same ``created_at``; an even cut of the
UUID space, or of MIN..MAX of ``created_at``, put nearly every row in one partition. The
reader cuts on quantiles of the split key instead; these tests measure the result.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import sparkkit
from pyspark.sql import functions as sf

from jobchain import connect
from jobchain.client import ChainStart
from jobchain.connect_backends import open_state

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

# Ten batches of one start_chains call each: every batch shares one created_at (and one id
# millisecond), so an even cut of MIN..MAX would put whole batches, and nearly every row, in
# one partition; quantile cuts give each of the eight partitions 1/8 of the rows. The shape,
# not the size, is what the reader must handle (20,000 rows read three times cost Spark far
# more than the 4,000 that show the same).
BURST = 4_000
BATCH = 400
PARTITIONS = 8


async def _seed(url: str) -> None:
    """One job from long ago, then BURST chains started by the client in one transaction."""
    state = await open_state(url)
    try:
        await sparkkit.create(state, "resize", 1, sparkkit.T0)
    finally:
        await state.close()
    client = await connect(url, notify="none", job_types=sparkkit.types)
    try:
        async with client.transaction() as tx:
            for offset in range(0, BURST, BATCH):
                starts = [ChainStart(job_type=sparkkit.resize, input={"n": offset + i}) for i in range(BATCH)]
                await client.start_chains(tx, starts)
    finally:
        await client.close()


def _stored_ids(url: str) -> list[str]:
    """Every job id in the table, read with the driver (not through the reader under test)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(urlsplit(url).path) as conn:
            return [r[0] for r in conn.execute("SELECT id FROM jobchain_job")]
    import psycopg

    [schema] = parse_qs(urlsplit(url).query)["schema"]
    with psycopg.connect(url.split("?")[0]) as conn:
        return [str(r[0]) for r in conn.execute(f'SELECT id FROM "{schema}".jobchain_job')]


def _partition_rows(spark: Any, url: str, table: str, partitioning: str) -> list[tuple[int, str]]:
    df = (
        spark.read.format("jobchain")
        .option("url", url)
        .option("table", table)
        .option("partitioning", partitioning)
        .option("partitions", str(PARTITIONS))
        .load()
    )
    assert df.rdd.getNumPartitions() == PARTITIONS
    rows = df.select(sf.spark_partition_id().alias("p"), "id").collect()
    return [(r["p"], r["id"]) for r in rows]


def test_a_burst_after_one_old_row_spreads_evenly(spark: Any, state_url: str) -> None:
    asyncio.run(_seed(state_url))
    stored = _stored_ids(state_url)
    assert len(stored) == BURST + 1
    for table, partitioning in (("jobs", "id"), ("jobs", "created_at"), ("chains", "created_at")):
        rows = _partition_rows(spark, state_url, table, partitioning)
        ids = [i for _, i in rows]
        assert len(ids) == len(set(ids)) == len(stored), "a row was read twice or missed"
        assert set(ids) == set(stored)
        sizes = Counter(p for p, _ in rows)
        counts = [sizes.get(p, 0) for p in range(PARTITIONS)]
        mean = len(ids) / PARTITIONS
        print(  # the figures for the closing note (run with -s)
            f"balance {state_url.split(':')[0]} {table} {partitioning}: partitions={PARTITIONS} "
            f"min={min(counts)} max={max(counts)} mean={mean:.1f} counts={counts}"
        )
        assert max(counts) <= 2 * mean, f"{table}/{partitioning}: {counts}"
