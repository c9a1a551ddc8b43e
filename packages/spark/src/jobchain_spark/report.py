"""Report: throughput, latency, attempts, retries, errors and backlog per job type and period.

The input is the live ``jobs`` and ``chains`` tables plus, optionally, the Parquet archive
(verified runs only); a job present in both (archived, deletion not yet finished) counts
once. Percentiles are nearest-rank (``percentile_approx`` with accuracy 10,000: exact for
groups of up to 10,000 values, within 0.01% of rank beyond).

Times and their definitions:

- ``latency``: created → completed, over completed jobs.
- ``wait`` (created → first attempt) and ``run`` (last attempt start → completed) need the
  attempt start times; the state tables record only ``last_attempt_at`` (when the last
  *failed* attempt ended). When the source has ``first_attempt_at`` / ``attempt_started_at``
  columns they are used; otherwise these figures are empty and the report says so.
- ``retry delay``: last failed attempt → completion, over completed jobs that were retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import pandas as pd

from jobchain.url import mask_url
from jobchain_spark.archive import read_archive
from jobchain_spark.errors import SparkOptionError
from jobchain_spark.source import read_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PERIODS: Final = {"hour": 3600, "day": 86400}
QUANTILES: Final = (0.5, 0.95, 0.99)
ACCURACY: Final = 10_000
TOP_ERRORS: Final = 10


@dataclass(frozen=True)
class Report:
    """The computed tables (pandas), keyed by name, plus how they were computed."""

    tables: dict[str, pd.DataFrame]
    period: str
    generated_at: datetime
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def _union(live: DataFrame, archived: DataFrame | None) -> DataFrame:
    if archived is None:
        return live
    columns = live.columns
    return live.unionByName(archived.select(*columns)).dropDuplicates(["id"])


def _seconds(later: Column, earlier: Column) -> Column:
    return later.cast("double") - earlier.cast("double")


def _percentiles(df: DataFrame, value: Column, name: str) -> DataFrame:
    from pyspark.sql import functions as sf

    q = sf.percentile_approx(value, list(QUANTILES), ACCURACY)
    return df.groupBy("type_name").agg(
        q[0].alias(f"{name}_p50_s"), q[1].alias(f"{name}_p95_s"), q[2].alias(f"{name}_p99_s")
    )


def build_report(
    spark: SparkSession,
    *,
    url: str,
    archive: str | None = None,
    period: str = "hour",
    now: datetime | None = None,
    partitions: int = 4,
) -> Report:
    """Compute every report table from the live tables at ``url`` and the archive at ``archive``."""
    from pyspark.sql import functions as sf

    if period not in PERIODS:
        raise SparkOptionError("period", f"must be one of {', '.join(PERIODS)}, got {period!r}")
    when = now or datetime.now(UTC)
    jobs = read_table(spark, url, "jobs", partitions=partitions)
    chains = read_table(spark, url, "chains", partitions=partitions)
    sources = [mask_url(url)]
    if archive is not None:
        sources.append(archive)
        jobs = _union(jobs, read_archive(spark, archive, "jobs"))
        chains = _union(chains, read_archive(spark, archive, "chains"))
    jobs = jobs.persist()
    notes: list[str] = []
    done = jobs.where(sf.col("status") == "completed")
    seconds = PERIODS[period]

    started = jobs.groupBy("type_name", sf.date_trunc(period, "created_at").alias("period")).agg(
        sf.count(sf.lit(1)).alias("started")
    )
    completed = done.groupBy("type_name", sf.date_trunc(period, "completed_at").alias("period")).agg(
        sf.count(sf.lit(1)).alias("completed")
    )
    throughput = (
        started.join(completed, ["type_name", "period"], "full_outer")
        .fillna(0, ["started", "completed"])
        .withColumn("throughput_per_hour", sf.col("completed") * 3600.0 / seconds)
        .orderBy("type_name", "period")
    )

    summary = jobs.groupBy("type_name").agg(
        sf.count(sf.lit(1)).alias("jobs"),
        sf.count(sf.when(sf.col("status") == "completed", 1)).alias("completed"),
        sf.count(sf.when(sf.col("attempt") > 1, 1)).alias("retried"),
        sf.count(sf.when(sf.col("attempt") > 0, 1)).alias("attempted"),
        sf.min(sf.when(sf.col("status") == "pending", sf.col("created_at"))).alias(
            "oldest_pending_created_at"
        ),
    )
    summary = summary.withColumn(
        "retry_rate", sf.when(sf.col("attempted") > 0, sf.col("retried") / sf.col("attempted"))
    ).withColumn("oldest_pending_age_s", _seconds(sf.lit(when), sf.col("oldest_pending_created_at")))
    summary = summary.join(
        _percentiles(done, _seconds(sf.col("completed_at"), sf.col("created_at")), "latency"),
        "type_name",
        "left",
    )
    retried = done.where(sf.col("last_attempt_at").isNotNull())
    summary = summary.join(
        _percentiles(retried, _seconds(sf.col("completed_at"), sf.col("last_attempt_at")), "retry_delay"),
        "type_name",
        "left",
    )
    if "first_attempt_at" in jobs.columns:
        summary = summary.join(
            _percentiles(done, _seconds(sf.col("first_attempt_at"), sf.col("created_at")), "wait"),
            "type_name",
            "left",
        )
    else:
        notes.append("wait time needs attempt start times, which these state tables do not record")
    if "attempt_started_at" in jobs.columns:
        summary = summary.join(
            _percentiles(done, _seconds(sf.col("completed_at"), sf.col("attempt_started_at")), "run"),
            "type_name",
            "left",
        )
    else:
        notes.append("run time needs attempt start times, which these state tables do not record")

    attempts = (
        jobs.where(sf.col("attempt") > 0)
        .groupBy("type_name", "attempt")
        .agg(sf.count(sf.lit(1)).alias("jobs"))
    ).orderBy("type_name", "attempt")
    errors = (
        jobs.where(sf.col("last_attempt_error").isNotNull())
        .withColumn("error", sf.substring(sf.split(sf.col("last_attempt_error"), "\n")[0], 1, 200))
        .groupBy("type_name", "error")
        .agg(sf.count(sf.lit(1)).alias("jobs"))
        .orderBy(sf.desc("jobs"), "type_name", "error")
        .limit(TOP_ERRORS)
    )
    by_status = (
        chains.groupBy(sf.col("type_name").alias("chain_type"), "status")
        .agg(sf.count(sf.lit(1)).alias("chains"))
        .orderBy("chain_type", "status")
    )
    tables = {
        "throughput": throughput.toPandas(),
        "summary": summary.orderBy("type_name").toPandas(),
        "attempts": attempts.toPandas(),
        "errors": errors.toPandas(),
        "chains_by_status": by_status.toPandas(),
    }
    jobs.unpersist()
    return Report(tables=tables, period=period, generated_at=when, sources=tuple(sources), notes=tuple(notes))


__all__ = ["PERIODS", "Report", "build_report"]
