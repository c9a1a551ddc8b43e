"""Every query of one DataFrame sees its own filters and nothing else (issue 15, item 1).

Spark 4.x keeps the plan of a DataFrame's last filter pushdown on the data source it shares
with every later query of that DataFrame, and a later query that pushes no filter reuses it.
These tests run the analyst's sequence on ONE DataFrame and check each answer against the
rows actually stored.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain_spark import SparkOptionError, read_table
from jobchain_spark.reader import ReadOptions

# Only the tests that use the session carry the spark marker (its xdist group): the others
# need no JVM and run on any worker.
pytestmark = pytest.mark.timeout(900)

T0 = sparkkit.T0


async def _seed(url: str) -> None:
    """30 pending resize jobs, 6 pending send_email jobs, 2 completed resize jobs."""
    state = await open_state(url)
    try:
        await sparkkit.create(state, "resize", 2, T0)
        for i in range(2):  # the two share a creation time: claim by type, whichever comes first
            started = T0 + timedelta(minutes=1 + i)
            await sparkkit.run(state, "resize", started=started, finished=started + timedelta(seconds=5))
        await sparkkit.create(state, "resize", 30, T0 + timedelta(hours=1))
        await sparkkit.create(
            state, "send_email", 6, T0 + timedelta(hours=2), input={"to": "a", "subject": "s"}
        )
    finally:
        await state.close()


@pytest.fixture(scope="module")
def seeded_url(module_state_url: str) -> str:
    """A state holding the history of ``_seed``, written once per backend: the tests only read it."""
    asyncio.run(_seed(module_state_url))
    return module_state_url


def _load(spark: Any, url: str) -> Any:
    return spark.read.format("jobchain").option("url", url).option("partitions", "3").load()


@pytest.mark.spark
def test_an_unfiltered_query_after_a_filtered_one_reads_every_row(spark: Any, seeded_url: str) -> None:
    state_url = seeded_url
    df = _load(spark, state_url)
    assert df.count() == 38
    assert df.where(df.status == "pending").count() == 36
    assert df.count() == 38
    counts = {r["status"]: r["count"] for r in df.groupBy("status").count().collect()}
    assert counts == {"pending": 36, "completed": 2}


@pytest.mark.spark
def test_filters_of_successive_queries_never_accumulate(spark: Any, seeded_url: str) -> None:
    state_url = seeded_url
    df = _load(spark, state_url)
    assert df.where(df.status == "completed").count() == 2
    assert df.where(df.type_name == "send_email").count() == 6
    assert df.where((df.type_name == "resize") & (df.status == "pending")).count() == 30
    assert {r["id"] for r in df.collect()} == {r["id"] for r in df.select("id").collect()}
    assert len(df.collect()) == 38
    assert df.where(df.status == "pending").groupBy("type_name").count().count() == 2


@pytest.mark.spark
def test_subset_options_narrow_every_query_of_the_dataframe(spark: Any, seeded_url: str) -> None:
    state_url = seeded_url
    resize = (
        spark.read.format("jobchain")
        .option("url", state_url)
        .option("partitions", "2")
        .option("type_name", "resize")
        .option("created_from", (T0 + timedelta(minutes=30)).isoformat())
        .load()
    )
    assert resize.count() == 30
    assert resize.where(resize.status == "completed").count() == 0
    assert resize.count() == 30
    # The partition boundaries are quantiles of the subset, not of the whole table.
    sizes = [len(p) for p in resize.select("id").rdd.glom().collect()]
    assert sizes == [15, 15]
    done = read_table(spark, state_url, statuses=["completed"], partitions=1)
    assert {r["status"] for r in done.collect()} == {"completed"}
    assert done.count() == 2
    emails = read_table(
        spark, state_url, "chains", type_names=["send_email"], created_until=T0 + timedelta(days=1)
    )
    assert emails.count() == 6


def test_subset_options_are_checked(sqlite_url: str) -> None:
    with pytest.raises(SparkOptionError, match=r"'status'.*unknown status 'done'"):
        ReadOptions.parse({"url": sqlite_url, "status": "pending,done"})
    with pytest.raises(SparkOptionError, match=r"'created_from'.*time zone"):
        ReadOptions.parse({"url": sqlite_url, "created_from": "2024-03-01T00:00:00"})
    with pytest.raises(SparkOptionError, match=r"'status'.*applies to table jobs"):
        ReadOptions.parse({"url": sqlite_url, "table": "chains", "status": "pending"})
    with pytest.raises(SparkOptionError, match=r"'type_name'.*at least one"):
        ReadOptions.parse({"url": sqlite_url, "type_name": " , "})
